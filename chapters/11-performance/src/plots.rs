//! Section 7: SVG plots of this run's figures, with the `plotters` crate (SVG backend only).
//!
//! Why plotters: the maintained Rust plotting crate; its SVG backend needs no system library
//! and, built without its font features, no font files either (labels are SVG `<text>`).

use std::path::Path;

use course::{OrFail, Outcome as Result};
use plotters::prelude::*;

use crate::client::{BatchRate, Results};

/// The file names and, for each, the series it must hold (tests/plots.rs checks them).
pub const LATENCY_SVG: &str = "latency-vs-size.svg";
pub const BATCH_SVG: &str = "throughput-vs-batch.svg";

/// Writes the plots into `dir`; returns each file's name and its series.
pub fn write_all(dir: &Path, res: &Results) -> Result<Vec<(String, Vec<String>)>> {
    std::fs::create_dir_all(dir).or_fail_with(|| format!("creating {}", dir.display()))?;
    let mut out = vec![];
    let series = latency(&dir.join(LATENCY_SVG), res).map_err(|e| format!("{LATENCY_SVG}: {e}"))?;
    out.push((LATENCY_SVG.to_string(), series));
    let series = batching(&dir.join(BATCH_SVG), res).map_err(|e| format!("{BATCH_SVG}: {e}"))?;
    out.push((BATCH_SVG.to_string(), series));
    Ok(out)
}

type Plot = std::result::Result<Vec<String>, Box<dyn std::error::Error>>;

const COLOURS: [RGBColor; 5] = [
    RED,
    BLUE,
    RGBColor(0, 140, 0),
    RGBColor(230, 140, 0),
    MAGENTA,
];

fn latency(path: &Path, res: &Results) -> Plot {
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let us = |ns: f64| ns / 1e3;
    let max = res
        .lat
        .iter()
        .map(|l| us(l.stats.median))
        .fold(1.0, f64::max);
    let min = res
        .lat
        .iter()
        .map(|l| us(l.stats.median))
        .fold(max, f64::min);
    let max_size = res.lat.iter().map(|l| l.size).max().unwrap_or(8) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "One-way latency against message size (median, node b -> node a)",
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (4f64..max_size * 2.0).log_scale(),
            (min / 2.0..max * 2.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc("latency (us)")
        .draw()?;
    let mut names = vec![];
    for (i, op) in ["TCP", "SEND", "WRITE", "WRITE pp", "READ"]
        .into_iter()
        .enumerate()
    {
        let pts: Vec<(f64, f64)> = res
            .lat
            .iter()
            .filter(|l| l.op == op)
            .map(|l| (l.size as f64, us(l.stats.median)))
            .collect();
        let c = COLOURS[i];
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(op)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))?;
        names.push(op.to_string());
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(names)
}

/// Picks one series' value from a batch row.
type Pick = fn(&BatchRate) -> f64;

fn batching(path: &Path, res: &Results) -> Plot {
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let max_b = res.batch.iter().map(|b| b.size).max().unwrap_or(1) as f64;
    let max_r = res
        .batch
        .iter()
        .map(|b| b.chained.max(b.separate))
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "RDMA WRITEs of 64 B per second against batch size",
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((0.8f64..max_b * 1.25).log_scale(), 0f64..max_r * 1.2)?;
    chart
        .configure_mesh()
        .x_desc("work requests per batch")
        .y_desc("WRs per second")
        .draw()?;
    let mut names = vec![];
    let series: [(&str, Pick); 2] = [
        ("chained (one ibv_post_send)", |b| b.chained),
        ("one ibv_post_send per WR", |b| b.separate),
    ];
    for (i, (name, f)) in series.into_iter().enumerate() {
        let pts: Vec<(f64, f64)> = res.batch.iter().map(|b| (b.size as f64, f(b))).collect();
        let c = COLOURS[i];
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))?;
        names.push(name.to_string());
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(names)
}

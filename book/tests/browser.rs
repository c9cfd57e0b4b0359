//! The rendered book in a real browser: Debian's headless Chromium, driven over the Chrome
//! DevTools Protocol. Four pages (a chapter, the failure catalogue, the state machine, and the
//! performance chapter with its plots) must load with no console error, no failed request and
//! no uncaught exception; their diagrams must be laid out (each `<svg>` of a figure has a
//! non-zero size) and their images loaded. A screenshot of each page is
//! kept in `target/book-check/` as the test's artifact.

use std::io::{BufRead as _, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tungstenite::{Message, WebSocket, stream::MaybeTlsStream};

const PAGES: &[(&str, usize, usize)] = &[
    // (page, inline diagrams it must show, images it must load)
    ("chapters/05-qp-state-machine.html", 1, 0),
    // A ladder diagram generated from a wire trace.
    ("chapters/07-rdma-write.html", 1, 0),
    ("failures.html", 1, 0),
    ("qp-states.html", 1, 0),
    // The performance plots, SVG files the chapter's README shows as images.
    ("chapters/11-performance.html", 0, 2),
];

/// Chromium, killed (with its profile dir, its temp files' dir too, removed) when dropped.
struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    session: Option<String>,
    events: Vec<Value>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chromium() -> PathBuf {
    for c in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(o) = Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            && o.status.success()
        {
            return PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
        }
    }
    panic!(
        "no Chromium found for the book's browser test\n  fix: bash scripts/setup.sh --dev \
         (installs Debian's chromium)"
    );
}

impl Browser {
    fn launch() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // Flags: headless as root in a sandbox-less container; nothing that reaches the network.
        let mut child = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--remote-debugging-port=0",
                "--window-size=1280,1600",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            // Its singleton socket dir (org.chromium.Chromium.*) goes under TMPDIR, and only a
            // clean exit removes it: in the profile dir, it goes with it after the kill below.
            .env("TMPDIR", profile.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting chromium");
        // Chromium prints "DevTools listening on ws://..." on stderr once it listens.
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!("chromium did not print its DevTools address within 60 s");
            }
        };
        let (ws, _) = tungstenite::connect(url.as_str()).expect("connecting to DevTools");
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        }
        let mut b = Browser {
            child,
            _profile: profile,
            ws,
            next_id: 1,
            session: None,
            events: vec![],
        };
        let target = b.call("Target.createTarget", json!({"url": "about:blank"}));
        let tid = target["targetId"].as_str().unwrap().to_string();
        let att = b.call(
            "Target.attachToTarget",
            json!({"targetId": tid, "flatten": true}),
        );
        b.session = Some(att["sessionId"].as_str().unwrap().to_string());
        for m in [
            "Runtime.enable",
            "Log.enable",
            "Page.enable",
            "Network.enable",
        ] {
            b.call(m, json!({}));
        }
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1280, "height": 1600, "deviceScaleFactor": 1, "mobile": false}),
        );
        b
    }

    fn read(&mut self, deadline: Instant) -> Option<Value> {
        while Instant::now() < deadline {
            match self.ws.read() {
                Ok(Message::Text(t)) => return Some(serde_json::from_str(&t).unwrap()),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("DevTools connection: {e}"),
            }
        }
        None
    }

    /// Sends a command (to the page's session once attached) and waits for its result; events
    /// that arrive meanwhile are kept.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        self.ws.send(Message::text(msg.to_string())).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let m = self
                .read(deadline)
                .unwrap_or_else(|| panic!("{method}: no answer within 60 s"));
            if m["id"] == json!(id) {
                if let Some(e) = m.get("error") {
                    panic!("{method}: {e}");
                }
                return m["result"].clone();
            }
            self.events.push(m);
        }
    }

    /// Waits for an event (kept ones first).
    fn wait_event(&mut self, method: &str, secs: u64) {
        if let Some(i) = self.events.iter().position(|e| e["method"] == method) {
            self.events.remove(i);
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(secs);
        while let Some(m) = self.read(deadline) {
            if m["method"] == method {
                return;
            }
            self.events.push(m);
        }
        panic!("no {method} within {secs} s");
    }

    /// Collects events for a short while (late console messages, lazy requests).
    fn settle(&mut self, ms: u64) {
        let deadline = Instant::now() + Duration::from_millis(ms);
        while let Some(m) = self.read(deadline) {
            self.events.push(m);
        }
    }

    /// The problems the events report: console errors, log errors, exceptions, failed loads.
    fn problems(&mut self) -> Vec<String> {
        let mut p = vec![];
        for e in self.events.drain(..) {
            let m = e["method"].as_str().unwrap_or("");
            let params = &e["params"];
            match m {
                "Runtime.consoleAPICalled" if params["type"] == "error" => {
                    p.push(format!("console.error: {}", params["args"]))
                }
                "Runtime.exceptionThrown" => {
                    p.push(format!("exception: {}", params["exceptionDetails"]))
                }
                "Log.entryAdded" if params["entry"]["level"] == "error" => {
                    p.push(format!("log error: {}", params["entry"]))
                }
                "Network.loadingFailed" => p.push(format!("request failed: {params}")),
                _ => {}
            }
        }
        p
    }
}

/// The book, rendered into a temp dir removed when the returned guard drops.
fn book() -> (tempfile::TempDir, PathBuf) {
    let repo = harness::course::workspace_root().unwrap();
    let dir = tempfile::Builder::new()
        .prefix("rxe-lab-book-browser")
        .tempdir()
        .unwrap();
    let out = dir.path().join("book");
    rxe_lab_book::build(&repo, &out).unwrap_or_else(|e| panic!("{e:#}"));
    (dir, out)
}

fn artifacts() -> PathBuf {
    let d = harness::course::workspace_root()
        .unwrap()
        .join("target/book-check");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_pages_render_their_diagrams_and_plots_without_errors() {
    let (_dir, book) = book();
    let mut b = Browser::launch();
    let shots = artifacts();
    let mut report = vec![];
    for (page, want, want_imgs) in PAGES {
        let url = format!("file://{}", book.join(page).display());
        b.problems();
        b.call("Page.navigate", json!({"url": url}));
        b.wait_event("Page.loadEventFired", 60);
        b.settle(500);
        // Every figure's <svg>, measured as laid out.
        let r = b.call(
            "Runtime.evaluate",
            json!({
                "expression": "JSON.stringify({title: document.title, \
                    figures: [...document.querySelectorAll('figure.lab-diagram')].map(f => { \
                      const s = f.querySelector('svg'); \
                      if (!s) return {id: f.id, svg: false}; \
                      const r = s.getBoundingClientRect(); \
                      return {id: f.id, svg: true, w: r.width, h: r.height, \
                              shapes: s.querySelectorAll('path, line, polygon, polyline, text, ellipse').length}; }), \
                    images: [...document.images].map(i => ({src: i.src, \
                      w: i.naturalWidth, h: i.naturalHeight, ok: i.complete && i.naturalWidth > 0})), \
                    code: document.querySelectorAll('pre code').length})",
                "returnByValue": true
            }),
        );
        let v: Value = serde_json::from_str(r["result"]["value"].as_str().unwrap()).unwrap();
        let figs = v["figures"].as_array().unwrap();
        assert!(
            figs.len() >= *want,
            "{page}: {} diagram(s), expected {want}: {v}",
            figs.len()
        );
        for f in figs {
            assert!(f["svg"] == json!(true), "{page}: figure without svg: {f}");
            assert!(
                f["w"].as_f64().unwrap() > 100.0 && f["h"].as_f64().unwrap() > 50.0,
                "{page}: diagram not laid out: {f}"
            );
            assert!(
                f["shapes"].as_u64().unwrap() > 5,
                "{page}: empty diagram: {f}"
            );
        }
        assert!(
            v["code"].as_u64().unwrap() >= 1,
            "{page}: no listing or output: {v}"
        );
        let imgs = v["images"].as_array().unwrap();
        assert!(
            imgs.len() >= *want_imgs,
            "{page}: {} image(s), expected {want_imgs}: {v}",
            imgs.len()
        );
        for i in imgs {
            assert!(i["ok"] == json!(true), "{page}: image not loaded: {i}");
        }
        let problems = b.problems();
        assert!(
            problems.is_empty(),
            "{page}: the browser reported:\n{}",
            problems.join("\n")
        );
        // The screenshot shows the page from its first diagram on.
        b.call(
            "Runtime.evaluate",
            json!({"expression": "(document.querySelector('figure.lab-diagram') || document.querySelector('main img'))?.scrollIntoView(); \
                window.scrollBy(0, -80)"}),
        );
        let shot = b.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(
            png.starts_with(b"\x89PNG"),
            "{page}: screenshot is not a PNG"
        );
        let name = Path::new(page)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let file = shots.join(format!("{name}.png"));
        std::fs::write(&file, &png).unwrap();
        report.push(format!(
            "{page}: {} ({} diagrams) -> {} ({} bytes)",
            v["title"],
            figs.len(),
            file.display(),
            png.len()
        ));
    }
    eprintln!("{}", report.join("\n"));
}

//! A KRM function served over HTTP for the `function` processor's tests: it reads the
//! ResourceList POSTed to it and answers with every item annotated `fn.example/team: <team>`
//! (the `team` of its functionConfig's data), or, when the data says `fail: "true"`, with an
//! error result and no items. Plain std threads, one request per connection.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

/// The message of the error result.
pub const REFUSAL: &str = "this team may not deploy here";

/// A running function server (it runs until the test process ends).
pub struct KrmFunction {
    /// Its URL.
    pub url: String,
    calls: Arc<AtomicUsize>,
}

impl KrmFunction {
    /// Serves on a free port of 127.0.0.1.
    pub fn serve() -> KrmFunction {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let url = format!("http://{}/set-team", listener.local_addr().unwrap());
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let _ = answer(stream);
                });
            }
        });
        KrmFunction { url, calls }
    }

    /// How many calls it has had.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

fn answer(stream: std::net::TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let list: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let data = &list["functionConfig"]["data"];
    let reply = if data["fail"] == "true" {
        json!({"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": [],
               "results": [{"severity": "error", "message": REFUSAL}]})
    } else {
        let team = data["team"].as_str().unwrap_or("none").to_string();
        let items: Vec<Value> = list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|mut item| {
                let metadata = item["metadata"].as_object_mut().expect("metadata");
                let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
                annotations["fn.example/team"] = json!(team);
                item
            })
            .collect();
        json!({"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": items,
               "results": [{"severity": "info", "message": format!("set team {team}")}]})
    };
    let reply = reply.to_string();
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
    let stream = reader.get_mut();
    stream.write_all(response.as_bytes())?;
    stream.flush()
}

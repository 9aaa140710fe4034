//! A webhook server standing in for an operator's Pod: HTTPS with a given serving certificate,
//! answering AdmissionReviews (the validating path refuses objects named `reject-*`) and
//! ConversionReviews (objects relabelled to the desired version), and recording each path it
//! was called on. Plain std threads and rustls; one request per read, HTTP/1.1 keep-alive.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

/// The message a refused object gets.
pub const REJECTION: &str = "rejected by the test webhook";

/// A running test webhook server (it runs until the test process ends).
pub struct TestWebhook {
    calls: Arc<Mutex<Vec<String>>>,
}

impl TestWebhook {
    /// Serves on `address` with the PEM certificate chain and key.
    pub fn serve(address: &str, cert_pem: &str, key_pem: &str) -> std::io::Result<TestWebhook> {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .expect("serving certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("serving key PEM");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
        let config = Arc::new(config);
        let listener = TcpListener::bind(address)?;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let recorded = calls.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (config, recorded) = (config.clone(), recorded.clone());
                std::thread::spawn(move || {
                    let Ok(connection) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let tls = rustls::StreamOwned::new(connection, stream);
                    let _ = serve_connection(tls, &recorded);
                });
            }
        });
        Ok(TestWebhook { calls })
    }

    /// The paths called so far.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

fn serve_connection<S: Read + Write>(
    stream: S,
    recorded: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .split('?')
            .next()
            .unwrap_or_default()
            .to_string();
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
        recorded.lock().unwrap().push(path.clone());
        let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let answer = if path.starts_with("/convert") {
            convert(&review)
        } else {
            admit(&review, path.starts_with("/validate"))
        };
        let answer = answer.to_string();
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        let stream = reader.get_mut();
        stream.write_all(response.as_bytes())?;
        stream.flush()?;
    }
}

/// Mutating calls always allow (without a patch); validating calls refuse `reject-*`.
fn admit(review: &Value, validating: bool) -> Value {
    let request = &review["request"];
    let name = request["name"]
        .as_str()
        .or_else(|| request["object"]["metadata"]["name"].as_str())
        .unwrap_or_default();
    let allowed = !(validating && name.starts_with("reject-"));
    let mut response = json!({"uid": request["uid"], "allowed": allowed});
    if !allowed {
        response["status"] = json!({"code": 403, "message": REJECTION});
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

fn convert(review: &Value) -> Value {
    let request = &review["request"];
    let desired = request["desiredAPIVersion"].clone();
    let objects: Vec<Value> = request["objects"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut object| {
            object["apiVersion"] = desired.clone();
            object
        })
        .collect();
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
           "response": {"uid": request["uid"], "convertedObjects": objects,
                        "result": {"status": "Success"}}})
}

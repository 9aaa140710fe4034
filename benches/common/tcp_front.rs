//! A TCP front a benchmark owns, on a fixed port, forwarding to one of the shared fixture
//! servers: taking it down (listener closed, open connections cut) is an outage of that source
//! as the agent sees it (connections refused, transfers broken), while the shared server itself,
//! which other tests use, keeps running. Plain threads and std sockets: it needs no runtime.

#![allow(dead_code)] // only the soak uses it

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

type Connections = Arc<Mutex<HashMap<u64, (TcpStream, TcpStream)>>>;

/// Forwards `127.0.0.1:port` to `target` while up.
pub struct TcpFront {
    /// The port it listens on while up (the same after every restart).
    pub port: u16,
    target: String,
    running: Option<Running>,
}

struct Running {
    stop: Arc<AtomicBool>,
    connections: Connections,
    acceptor: JoinHandle<()>,
}

impl TcpFront {
    /// A front for `target` (`host:port`) on a free port, started.
    pub fn start(target: &str, port: u16) -> TcpFront {
        let mut front = TcpFront {
            port,
            target: target.to_string(),
            running: None,
        };
        front.resume();
        front
    }

    /// Whether it is listening.
    pub fn is_up(&self) -> bool {
        self.running.is_some()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Listens again at the same port.
    pub fn resume(&mut self) {
        assert!(self.running.is_none(), "already up");
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("binding 127.0.0.1:{}: {e}", self.port));
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let stop = Arc::new(AtomicBool::new(false));
        let connections: Connections = Arc::default();
        let acceptor = {
            let (stop, connections, target) =
                (stop.clone(), connections.clone(), self.target.clone());
            std::thread::spawn(move || accept_loop(listener, &target, &stop, &connections))
        };
        self.running = Some(Running {
            stop,
            connections,
            acceptor,
        });
    }

    /// Closes the listener and cuts every open connection.
    pub fn stop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        running.stop.store(true, Ordering::SeqCst);
        let _ = running.acceptor.join();
        for (client, upstream) in running.connections.lock().expect("lock").values() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for TcpFront {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: TcpListener, target: &str, stop: &AtomicBool, connections: &Connections) {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let _ = client.set_nonblocking(false);
                let Ok(upstream) = TcpStream::connect(target) else {
                    continue; // the client sees the connection closed
                };
                let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                let (Ok(c2), Ok(u2), Ok(c3), Ok(u3)) = (
                    client.try_clone(),
                    upstream.try_clone(),
                    client.try_clone(),
                    upstream.try_clone(),
                ) else {
                    continue;
                };
                connections.lock().expect("lock").insert(id, (c3, u3));
                let conns = connections.clone();
                std::thread::spawn(move || {
                    let down = std::thread::spawn(move || pipe(u2, c2));
                    pipe(client, upstream);
                    let _ = down.join();
                    conns.lock().expect("lock").remove(&id);
                });
            }
            // Non-blocking accept: check the stop flag every 20 ms.
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Copies `from` to `to` until either side ends, then ends both directions of `to`'s write side.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

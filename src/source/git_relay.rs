//! A relay in the agent between libgit2 and a git server, counting what the server sends.
//!
//! libgit2 reads a server's ref advertisement whole into memory before it calls back at all
//! (its transfer-progress callback runs for the pack only), and a blocking libgit2 call cannot
//! be interrupted from outside. So every connection libgit2 makes for a remote source goes
//! through a relay on the agent's loopback interface:
//! - `https://` repositories name the relay as libgit2's proxy (`CONNECT host:port`; TLS stays
//!   end to end, certificates are checked against the repository's host);
//! - `http://` repositories are rewritten to the relay's address (libgit2 connects to the
//!   server itself even with a proxy for plain HTTP), and the relay puts the repository's
//!   `Host` back into each request;
//! - `ssh://`, scp-like and `git://` repositories are rewritten to the relay's address (SSH is
//!   encrypted end to end and the host key is checked against the original host).
//!
//! The relay resolves the server's name and connects itself, so the egress policy judges the
//! address it actually connects to, and only to the repository's host and port. It counts the
//! bytes the server sends against the operation's [`Limit`] (the ref advertisement limit for
//! an ls-remote; advertisement and pack for a fetch) and closes both sides once over it, when
//! the fetch is cancelled or when its deadline passes: libgit2's read then fails at once,
//! holding no more than the limit. Dropping the [`Relay`] closes every connection it holds.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::budget::Cancel;
use crate::bounded::{Counter, Limit, ReadError};
use crate::egress::EgressPolicy;

/// The largest proxy request head read from libgit2.
const MAX_HEAD_BYTES: usize = 16 << 10;
/// How often a relayed connection looks at its fetch's cancel flag and deadline.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// How libgit2 reaches the server through the relay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Route {
    /// The URL libgit2 is given (rewritten to the relay for SSH and git://).
    pub url: String,
    /// The proxy libgit2 is given (HTTP and HTTPS).
    pub proxy: Option<String>,
}

/// How the relay takes libgit2's connections.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    /// As an HTTPS proxy: `CONNECT host:port`, to the repository's server only.
    Connect,
    /// As the HTTP server itself: each request's `Host` is set back to this (the repository's
    /// `host[:port]`).
    Http(String),
    /// Every connection relayed as it is.
    Raw,
}

/// What a relay needs to know of its fetch.
pub(crate) struct RelaySettings {
    /// Which addresses may be reached.
    pub egress: EgressPolicy,
    /// Raised when the fetch ends.
    pub cancel: Cancel,
    /// When the fetch must be done.
    pub deadline: Instant,
    /// Time allowed to connect to the server.
    pub connect_timeout: Duration,
}

/// Why the relay closed an operation's connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// The server sent more than the operation's limit (the refusal's text).
    OverLimit(String),
    /// The server's address is one the egress policy refuses.
    Egress(String),
    /// libgit2 asked for another server than the repository's.
    OtherServer(String),
    /// The server could not be reached.
    Unreachable(String),
    /// The fetch was cancelled.
    Cancelled,
    /// The fetch passed its deadline.
    Deadline,
}

/// The state relayed connections share: the server, the current operation's counter and why
/// the relay closed its connections, once it did.
struct Shared {
    host: String,
    port: u16,
    mode: Mode,
    settings: RelaySettings,
    counter: Mutex<Option<Counter>>,
    closed: Mutex<Option<Closed>>,
}

/// A handle on the relay's counters, for libgit2's side (cloned into blocking tasks).
#[derive(Clone)]
pub(crate) struct RelayMeter(Arc<Shared>);

impl RelayMeter {
    /// Starts an operation counted against `limit` (what its connections received before is
    /// forgotten).
    pub(crate) fn begin(&self, limit: Limit) {
        *self.0.counter.lock().unwrap_or_else(|p| p.into_inner()) = Some(Counter::new(limit));
        *self.0.closed.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Why the relay closed the operation's connections, if it did.
    pub(crate) fn closed(&self) -> Option<Closed> {
        self.0
            .closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The limit passed, if that is why the relay closed the operation's connections.
    pub(crate) fn over_limit(&self) -> Option<ReadError> {
        let counter = self.0.counter.lock().unwrap_or_else(|p| p.into_inner());
        let counter = counter.as_ref()?;
        (counter.read() > counter.limit().max_bytes).then(|| ReadError::TooLarge {
            limit: counter.limit(),
            read: counter.read(),
            declared: None,
        })
    }

    fn count(&self, bytes: usize) -> Result<(), ReadError> {
        let mut counter = self.0.counter.lock().unwrap_or_else(|p| p.into_inner());
        match counter.as_mut() {
            Some(counter) => counter.add(bytes),
            None => Ok(()),
        }
    }

    fn close(&self, why: Closed) {
        let mut closed = self.0.closed.lock().unwrap_or_else(|p| p.into_inner());
        closed.get_or_insert(why);
    }
}

/// A running relay; its connections close when it is dropped.
pub(crate) struct Relay {
    meter: RelayMeter,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Relay {
    /// Starts a relay for `repository` (a remote URL or scp-like location at `host:port`);
    /// returns it and how libgit2 reaches the server through it.
    pub(crate) async fn start(
        repository: &str,
        (host, port): (String, u16),
        settings: RelaySettings,
    ) -> std::io::Result<(Relay, Route)> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let (mode, route) = route(repository, address);
        let shared = Arc::new(Shared {
            host,
            port,
            mode,
            settings,
            counter: Mutex::new(None),
            closed: Mutex::new(None),
        });
        let meter = RelayMeter(shared);
        let accepting = meter.clone();
        let task = tokio::spawn(async move {
            // Dropped with the accept loop: every relayed connection is closed with it.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        connections.spawn(relay_connection(client, accepting.clone()));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok((Relay { meter, task }, route))
    }

    /// The handle libgit2's side counts with.
    pub(crate) fn meter(&self) -> RelayMeter {
        self.meter.clone()
    }
}

/// The mode and the route for `repository` through a relay at `address`.
fn route(repository: &str, address: SocketAddr) -> (Mode, Route) {
    let relay = format!("127.0.0.1:{}", address.port());
    let parsed = url::Url::parse(repository)
        .ok()
        .filter(|_| repository.contains("://"));
    match parsed {
        Some(parsed) if parsed.scheme() == "https" => (
            Mode::Connect,
            Route {
                url: repository.to_string(),
                proxy: Some(format!("http://{address}")),
            },
        ),
        Some(mut parsed) => {
            let host = match (parsed.host_str(), parsed.port()) {
                (Some(host), Some(port)) => format!("{host}:{port}"),
                (Some(host), None) => host.to_string(),
                (None, _) => String::new(),
            };
            let mode = if parsed.scheme() == "http" {
                Mode::Http(host)
            } else {
                Mode::Raw
            };
            let _ = parsed.set_host(Some("127.0.0.1"));
            let _ = parsed.set_port(Some(address.port()));
            let url = parsed.to_string();
            (mode, Route { url, proxy: None })
        }
        // scp-like `[user@]host:path`: libgit2 reads `[host:port]:path` with the same path.
        None => {
            let (before, path) = repository.split_once(':').unwrap_or((repository, ""));
            let user = before
                .rsplit_once('@')
                .map(|(user, _)| format!("{user}@"))
                .unwrap_or_default();
            let url = format!("{user}[{relay}]:{path}");
            (Mode::Raw, Route { url, proxy: None })
        }
    }
}

/// Relays one connection of libgit2's.
async fn relay_connection(mut client: TcpStream, meter: RelayMeter) {
    let shared = meter.0.clone();
    if shared.mode == Mode::Connect {
        if let Err(why) = connect_head(&mut client, &shared).await {
            meter.close(why);
            let _ = client
                .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                .await;
            return;
        }
    }
    let server = match connect(&shared).await {
        Ok(server) => server,
        Err(why) => {
            meter.close(why);
            if shared.mode == Mode::Connect {
                let _ = client
                    .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                    .await;
            }
            return;
        }
    };
    if shared.mode == Mode::Connect
        && client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
    {
        return;
    }
    pump(client, server, &meter).await;
}

/// Reads libgit2's `CONNECT` request and checks that it targets the repository's server.
async fn connect_head(client: &mut TcpStream, shared: &Shared) -> Result<(), Closed> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_HEAD_BYTES {
            return Err(Closed::OtherServer(
                "a proxy request that is too long".into(),
            ));
        }
        let n = client
            .read(&mut buf)
            .await
            .map_err(|e| Closed::Unreachable(format!("reading libgit2's proxy request: {e}")))?;
        if n == 0 {
            return Err(Closed::Unreachable(
                "libgit2 closed the proxy connection".into(),
            ));
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head
        .split(|b| *b == b'\n')
        .next()
        .map(|l| String::from_utf8_lossy(l).trim().to_string())
        .unwrap_or_default();
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !method.eq_ignore_ascii_case("CONNECT") {
        return Err(Closed::OtherServer(format!(
            "a proxy request {method} {target}"
        )));
    }
    let (host, port) = split_host_port(target, 443);
    let wanted = shared.host.trim_start_matches('[').trim_end_matches(']');
    if !host.eq_ignore_ascii_case(wanted) || port != shared.port {
        return Err(Closed::OtherServer(format!(
            "a connection to {host}:{port}, not to the repository's server {}:{}",
            shared.host, shared.port
        )));
    }
    Ok(())
}

/// One line of libgit2's request (with its end), at most [`MAX_HEAD_BYTES`]; empty at the end
/// of the connection.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(client: &mut R) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncBufReadExt;
    let mut line = Vec::new();
    client
        .take(MAX_HEAD_BYTES as u64)
        .read_until(b'\n', &mut line)
        .await?;
    Ok(line)
}

/// Sends libgit2's HTTP requests on to the server, each with `host` as its `Host`: heads are
/// read line by line, bodies passed through by their `Content-Length` or chunks.
async fn forward_requests<R, W>(client: R, server: &mut W, host: &str) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut client = tokio::io::BufReader::new(client);
    loop {
        let mut head = Vec::new();
        let mut length: u64 = 0;
        let mut chunked = false;
        loop {
            let line = read_line(&mut client).await?;
            if line.is_empty() {
                return Ok(());
            }
            let text = String::from_utf8_lossy(&line).to_ascii_lowercase();
            if text.starts_with("host:") {
                head.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
                continue;
            }
            if let Some(value) = text.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
            if text.starts_with("transfer-encoding:") && text.contains("chunked") {
                chunked = true;
            }
            head.extend_from_slice(&line);
            if line == b"\r\n" || line == b"\n" || head.len() > MAX_HEAD_BYTES {
                break;
            }
        }
        server.write_all(&head).await?;
        if chunked {
            loop {
                let size_line = read_line(&mut client).await?;
                server.write_all(&size_line).await?;
                let text = String::from_utf8_lossy(&size_line);
                let size = u64::from_str_radix(text.trim().split(';').next().unwrap_or(""), 16)
                    .unwrap_or(0);
                if size == 0 {
                    // The trailer, to its empty line.
                    loop {
                        let line = read_line(&mut client).await?;
                        server.write_all(&line).await?;
                        if line.is_empty() || line == b"\r\n" || line == b"\n" {
                            break;
                        }
                    }
                    break;
                }
                tokio::io::copy(&mut (&mut client).take(size + 2), server).await?;
            }
        } else if length > 0 {
            tokio::io::copy(&mut (&mut client).take(length), server).await?;
        }
        server.flush().await?;
    }
}

fn split_host_port(target: &str, default: u16) -> (String, u16) {
    match target.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port.parse().unwrap_or(default),
        ),
        _ => (target.to_string(), default),
    }
}

/// Connects to the repository's server, on an address the egress policy allows.
async fn connect(shared: &Shared) -> Result<TcpStream, Closed> {
    let host = shared.host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, shared.port))
        .await
        .map_err(|e| Closed::Unreachable(format!("resolving {host}: {e}")))?
        .collect();
    let mut last = format!("{host} resolves to no address");
    for address in &addresses {
        // Every address is judged before any is tried: a name that resolves to a refused
        // address is refused, as the other clients' resolver refuses it.
        if let Err(refused) = shared.settings.egress.check_ip(host, address.ip()) {
            return Err(Closed::Egress(refused.to_string()));
        }
    }
    for address in addresses {
        let attempt =
            tokio::time::timeout(shared.settings.connect_timeout, TcpStream::connect(address))
                .await;
        match attempt {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = format!("connecting to {address}: {e}"),
            Err(_) => last = format!("connecting to {address}: timed out"),
        }
    }
    Err(Closed::Unreachable(last))
}

/// Copies both ways until either side closes, counting what the server sends; stops at the
/// operation's limit, its fetch's cancellation or deadline.
async fn pump(client: TcpStream, server: TcpStream, meter: &RelayMeter) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // libgit2's side closing its writes leaves the server's answer to finish.
    let mode = meter.0.mode.clone();
    let upstream = async {
        let _ = match &mode {
            Mode::Http(host) => forward_requests(&mut client_read, &mut server_write, host).await,
            Mode::Connect | Mode::Raw => tokio::io::copy(&mut client_read, &mut server_write)
                .await
                .map(|_| ()),
        };
        let _ = server_write.shutdown().await;
        std::future::pending::<()>().await
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Err(over) = meter.count(n) {
                meter.close(Closed::OverLimit(over.to_string()));
                break;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    let settings = &meter.0.settings;
    let watch = async {
        loop {
            tokio::time::sleep(CHECK_EVERY).await;
            if settings.cancel.is_cancelled() {
                meter.close(Closed::Cancelled);
                break;
            }
            if Instant::now() >= settings.deadline {
                meter.close(Closed::Deadline);
                break;
            }
        }
    };
    // The server's side ending (its close, the limit), or the fetch's, ends the connection.
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = watch => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_keep_the_path_and_user() {
        let relay: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let (mode, r) = route("https://git.example/org/repo.git", relay);
        assert_eq!(mode, Mode::Connect);
        assert_eq!(r.url, "https://git.example/org/repo.git");
        assert_eq!(r.proxy.as_deref(), Some("http://127.0.0.1:4000"));
        let (mode, r) = route("http://git.example:8080/org/repo.git", relay);
        assert_eq!(mode, Mode::Http("git.example:8080".into()));
        assert_eq!(r.url, "http://127.0.0.1:4000/org/repo.git");
        let (mode, r) = route("ssh://git@git.example:2222/org/repo.git", relay);
        assert_eq!(mode, Mode::Raw);
        assert_eq!(r.url, "ssh://git@127.0.0.1:4000/org/repo.git");
        assert_eq!(r.proxy, None);
        let (_, r) = route("git@github.com:org/repo.git", relay);
        assert_eq!(r.url, "git@[127.0.0.1:4000]:org/repo.git");
        let (_, r) = route("git://git.example/repo.git", relay);
        assert_eq!(r.url, "git://127.0.0.1:4000/repo.git");
    }

    #[tokio::test]
    async fn http_requests_carry_the_repository_host() {
        let requests = b"GET /r.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: 127.0.0.1:4000\r\n\r\n\
POST /r.git/git-upload-pack HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nTransfer-Encoding: chunked\r\n\r\n\
4\r\nwant\r\n0\r\n\r\n\
POST /r.git/git-upload-pack HTTP/1.1\r\nhost: 127.0.0.1:4000\r\nContent-Length: 4\r\n\r\ndone";
        let mut sent = Vec::new();
        forward_requests(&requests[..], &mut sent, "git.example:8080")
            .await
            .unwrap();
        let sent = String::from_utf8(sent).unwrap();
        assert_eq!(
            sent.matches("Host: git.example:8080\r\n").count(),
            3,
            "{sent}"
        );
        assert!(!sent.contains("127.0.0.1"), "{sent}");
        assert!(
            sent.contains("4\r\nwant\r\n0\r\n\r\n") && sent.ends_with("done"),
            "{sent}"
        );
    }

    #[test]
    fn connect_targets_split_host_and_port() {
        assert_eq!(
            split_host_port("git.example:443", 1),
            ("git.example".into(), 443)
        );
        assert_eq!(split_host_port("[::1]:8443", 1), ("::1".into(), 8443));
        assert_eq!(
            split_host_port("git.example", 443),
            ("git.example".into(), 443)
        );
    }

    /// A server that sends `size` bytes to whoever connects; the relay stops it at the limit
    /// and says why.
    #[tokio::test]
    async fn a_server_that_keeps_sending_is_cut_off_at_the_limit() {
        let server = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = server.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = server.accept().await.unwrap();
            let chunk = vec![b'x'; 64 << 10];
            while socket.write_all(&chunk).await.is_ok() {}
        });
        let settings = RelaySettings {
            egress: EgressPolicy::allow_all(),
            cancel: Cancel::new(),
            deadline: Instant::now() + Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        };
        let repository = format!("ssh://git@127.0.0.1:{port}/repo.git");
        let (relay, route) = Relay::start(&repository, ("127.0.0.1".into(), port), settings)
            .await
            .unwrap();
        let meter = relay.meter();
        meter.begin(crate::bounded::Reader::GitAdvertisement.limit(1 << 20));
        let relay_port: u16 = route
            .url
            .split(':')
            .nth(2)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", relay_port)).await.unwrap();
        let mut received = Vec::new();
        client.read_to_end(&mut received).await.unwrap();
        assert!(
            received.len() <= (1 << 20) + (64 << 10),
            "{}",
            received.len()
        );
        let Some(Closed::OverLimit(refusal)) = meter.closed() else {
            panic!("{:?}", meter.closed());
        };
        assert!(refusal.contains("--git-max-advertisement-mib"), "{refusal}");
        assert!(meter.over_limit().is_some());
    }

    #[tokio::test]
    async fn the_proxy_reaches_only_the_repository_server() {
        let settings = RelaySettings {
            egress: EgressPolicy::allow_all(),
            cancel: Cancel::new(),
            deadline: Instant::now() + Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        };
        let (relay, route) = Relay::start(
            "https://git.example/repo.git",
            ("git.example".into(), 443),
            settings,
        )
        .await
        .unwrap();
        let proxy = route.proxy.unwrap();
        let address = proxy.trim_start_matches("http://");
        let mut client = TcpStream::connect(address).await.unwrap();
        client
            .write_all(
                b"CONNECT elsewhere.example:443 HTTP/1.1\r\nHost: elsewhere.example:443\r\n\r\n",
            )
            .await
            .unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert!(
            answer.starts_with(b"HTTP/1.1 403"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        let Some(Closed::OtherServer(refusal)) = relay.meter().closed() else {
            panic!("{:?}", relay.meter().closed());
        };
        assert!(refusal.contains("elsewhere.example:443"), "{refusal}");
    }
}

//! The one way the agent reads bytes that a server or a sender chose: a body is read only
//! through here, with a limit, counting the bytes that arrive.
//!
//! Every read names its [`Reader`] (what is read, and the budget that bounds it) and its limit
//! in bytes. A declared `Content-Length` over the limit is refused before anything is read; a
//! smaller one is not trusted: a body that grows past the limit is cut off at the chunk that
//! crosses it. What was read is at most the limit plus one chunk (hyper's chunks are at most a
//! few hundred KiB), whatever the server declares or sends.
//!
//! The other ways to read a body (reqwest's `Response::bytes`, `text`, `json`, `chunk` and
//! `bytes_stream`, http-body-util's `collect`, oci-client's pulls) are disallowed in
//! `clippy.toml`, so an unbounded read does not build under `cargo clippy -D warnings`. The
//! readers listed in [`Reader::ALL`] are the inventory of `docs/security.md`: a test fails when
//! one has no entry there.

use bytes::Bytes;

/// Declares the readers: each with its name in the inventory and the budget refusals name.
macro_rules! readers {
    ($( $(#[doc = $doc:literal])* $variant:ident => $name:literal, $budget:expr; )*) => {
        /// Everything the agent reads from a server or sender, by what it is.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reader {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl Reader {
            /// Every reader (the inventory of `docs/security.md` lists each by name).
            pub const ALL: &'static [Reader] = &[$(Reader::$variant),*];

            /// The name the inventory lists it by.
            pub fn name(self) -> &'static str {
                match self {
                    $(Reader::$variant => $name,)*
                }
            }

            /// The budget that bounds it, with the flag that sets it (named in refusals).
            pub fn budget(self) -> &'static str {
                match self {
                    $(Reader::$variant => $budget,)*
                }
            }
        }
    };
}

/// The budget of registry documents, named in refusals.
pub const REGISTRY_DOCUMENT_BUDGET: &str =
    "the registry document limit (--registry-max-document-kib)";
/// The budget of one source's bytes, named in refusals.
pub const UNPACK_BUDGET: &str = "the per-source unpack limit (--unpack-max-mib)";
/// The budget of one file of a source, named in refusals.
pub const FILE_BUDGET: &str = "the per-file limit (--unpack-max-file-mib)";
/// The budget of git ref advertisements, named in refusals.
pub const GIT_ADVERTISEMENT_BUDGET: &str =
    "the git ref advertisement limit (--git-max-advertisement-mib)";

readers! {
    /// An image manifest or index (of a source, or of a signature or referrer).
    RegistryManifest => "registry-manifest", REGISTRY_DOCUMENT_BUDGET;
    /// One page of a repository's tag list.
    RegistryTagList => "registry-tag-list", REGISTRY_DOCUMENT_BUDGET;
    /// The referrers index of an artifact (its Sigstore bundles).
    RegistryReferrers => "registry-referrers", REGISTRY_DOCUMENT_BUDGET;
    /// A token server's answer (a registry's bearer token).
    RegistryToken => "registry-token", "the registry token answer limit (256 KiB)";
    /// A registry's error answer, read for its error codes and message.
    RegistryError => "registry-error", "the registry error answer limit (64 KiB)";
    /// An image layer, streamed to the cache's scratch space while it is hashed.
    RegistryLayer => "registry-layer", UNPACK_BUDGET;
    /// A cosign signature layer or Sigstore bundle.
    SignatureBlob => "signature-blob", "the signature blob limit (1 MiB)";
    /// An HTTP source's file or archive, streamed to the scratch space while it is hashed.
    HttpSource => "http-source", UNPACK_BUDGET;
    /// A chart repository's `index.yaml`, streamed to the scratch space, then parsed.
    ChartIndex => "chart-index", FILE_BUDGET;
    /// A packaged chart of a chart repository, streamed to the scratch space while it is hashed.
    ChartArchive => "chart-archive", UNPACK_BUDGET;
    /// A chart's provenance file (`.prov`).
    ChartProvenance => "chart-provenance", "the provenance file limit (256 KiB)";
    /// A git server's ref advertisement (ls-remote, and the start of every fetch).
    GitAdvertisement => "git-advertisement", GIT_ADVERTISEMENT_BUDGET;
    /// A git server's pack (with the advertisement before it).
    GitPack => "git-pack", UNPACK_BUDGET;
    /// A `function` processor's HTTP answer (a ResourceList).
    FunctionAnswer => "function-answer", "the function answer limit (64 MiB)";
    /// A notification posted to the receiver.
    ReceiverRequest => "receiver-request", "the receiver's body limit (1 MiB)";
}

impl Reader {
    /// This reader with a limit of `max_bytes`.
    pub fn limit(self, max_bytes: u64) -> Limit {
        Limit {
            reader: self,
            max_bytes,
        }
    }
}

/// A reader and its limit in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// What is read.
    pub reader: Reader,
    /// The most bytes read.
    pub max_bytes: u64,
}

/// Why a bounded read stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// More arrived (or was declared) than the limit.
    #[error("{}", over_text(.limit, .read, .declared))]
    TooLarge {
        /// The reader and its limit.
        limit: Limit,
        /// Bytes read before the read stopped (0 when the declared size refused it).
        read: u64,
        /// The size the server declared, when it declared one over the limit.
        declared: Option<u64>,
    },
    /// The connection failed while the body was read.
    #[error("reading the answer: {0}")]
    Transport(String),
}

fn over_text(limit: &Limit, read: &u64, declared: &Option<u64>) -> String {
    match declared {
        Some(declared) => format!(
            "{declared} bytes declared, over {} of {} bytes",
            limit.reader.budget(),
            limit.max_bytes
        ),
        None => format!(
            "more than {} bytes ({read} read), over {}",
            limit.max_bytes,
            limit.reader.budget()
        ),
    }
}

impl ReadError {
    /// The value a refusal names: what arrived or was declared.
    pub fn value(&self) -> String {
        match self {
            ReadError::TooLarge {
                declared: Some(declared),
                ..
            } => format!("{declared} bytes declared"),
            ReadError::TooLarge { limit, read, .. } => {
                format!("more than {} bytes ({read} received)", limit.max_bytes)
            }
            ReadError::Transport(detail) => detail.clone(),
        }
    }
}

/// Counts bytes that arrive against a [`Limit`]: for streams that are not HTTP bodies (a git
/// connection relayed by the agent).
#[derive(Debug)]
pub struct Counter {
    limit: Limit,
    read: u64,
}

impl Counter {
    /// Nothing counted yet.
    pub fn new(limit: Limit) -> Counter {
        Counter { limit, read: 0 }
    }

    /// Counts `bytes` more; past the limit, the refusal.
    pub fn add(&mut self, bytes: usize) -> Result<(), ReadError> {
        self.read = self.read.saturating_add(bytes as u64);
        if self.read > self.limit.max_bytes {
            return Err(ReadError::TooLarge {
                limit: self.limit,
                read: self.read,
                declared: None,
            });
        }
        Ok(())
    }

    /// Bytes counted so far.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// The limit counted against.
    pub fn limit(&self) -> Limit {
        self.limit
    }
}

/// A response body read chunk by chunk under a limit.
pub struct Body {
    response: reqwest::Response,
    counter: Counter,
}

impl Body {
    /// `response`'s body under `limit`; refused at once when its declared length is over it.
    pub fn new(response: reqwest::Response, limit: Limit) -> Result<Body, ReadError> {
        if let Some(declared) = response.content_length() {
            if declared > limit.max_bytes {
                return Err(ReadError::TooLarge {
                    limit,
                    read: 0,
                    declared: Some(declared),
                });
            }
        }
        Ok(Body {
            response,
            counter: Counter::new(limit),
        })
    }

    /// The next chunk, counted; `None` at the end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, ReadError> {
        // The one place a reqwest body is read: counted before it is handed on.
        #[allow(clippy::disallowed_methods)]
        let next = self.response.chunk().await;
        match next {
            Ok(Some(chunk)) => {
                self.counter.add(chunk.len())?;
                Ok(Some(chunk))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(ReadError::Transport(describe_error(&e.without_url()))),
        }
    }

    /// Bytes read so far.
    pub fn read(&self) -> u64 {
        self.counter.read()
    }

    /// The whole body, in memory.
    pub async fn to_vec(mut self) -> Result<Vec<u8>, ReadError> {
        let mut out = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }
}

/// An error and its causes as one line (reqwest's own Display omits the causes).
pub fn describe_error(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let part = c.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = c.source();
    }
    text
}

/// `response`'s whole body under `limit`, in memory.
pub async fn read_to_vec(response: reqwest::Response, limit: Limit) -> Result<Vec<u8>, ReadError> {
    Body::new(response, limit)?.to_vec().await
}

/// At most the first `limit.max_bytes` of `response`'s body, and nothing past them: for an
/// excerpt of an error answer, where the rest does not matter.
pub async fn read_prefix(response: reqwest::Response, limit: Limit) -> Vec<u8> {
    let mut body = Body {
        response,
        counter: Counter::new(Limit {
            max_bytes: u64::MAX,
            ..limit
        }),
    };
    let mut out = Vec::new();
    while let Ok(Some(chunk)) = body.chunk().await {
        let room = (limit.max_bytes as usize).saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() as u64 >= limit.max_bytes {
            break;
        }
    }
    out
}

/// A request body a server received (hyper's), whole, under `limit`.
pub async fn read_request<B>(body: B, limit: Limit) -> Result<Bytes, ReadError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    use http_body_util::BodyExt as _;
    let declared = body.size_hint().exact();
    if let Some(declared) = declared.filter(|d| *d > limit.max_bytes) {
        return Err(ReadError::TooLarge {
            limit,
            read: 0,
            declared: Some(declared),
        });
    }
    let mut body = std::pin::pin!(body);
    let mut counter = Counter::new(limit);
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ReadError::Transport(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            counter.add(data.len())?;
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_have_distinct_names_and_a_budget() {
        let mut names: Vec<&str> = Reader::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Reader::ALL.len());
        for reader in Reader::ALL {
            assert!(reader.budget().starts_with("the "), "{reader:?}");
        }
    }

    #[test]
    fn a_counter_refuses_the_byte_past_its_limit() {
        let mut counter = Counter::new(Reader::RegistryManifest.limit(10));
        counter.add(6).unwrap();
        counter.add(4).unwrap();
        let err = counter.add(1).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("more than 10 bytes (11 read)")
                && text.contains("--registry-max-document-kib"),
            "{text}"
        );
        assert_eq!(err.value(), "more than 10 bytes (11 received)");
    }

    /// What a refused read says it read and was declared.
    fn over(err: ReadError) -> (u64, Option<u64>) {
        match err {
            ReadError::TooLarge { read, declared, .. } => (read, declared),
            other => panic!("{other}"),
        }
    }

    #[tokio::test]
    async fn request_bodies_are_counted_not_trusted() {
        let limit = |n| Reader::ReceiverRequest.limit(n);
        let small = http_body_util::Full::new(Bytes::from_static(b"abc"));
        assert_eq!(&read_request(small, limit(3)).await.unwrap()[..], b"abc");
        let big = http_body_util::Full::new(Bytes::from(vec![0u8; 100]));
        let err = read_request(big, limit(10)).await.unwrap_err();
        assert_eq!(over(err), (0, Some(100)));
        // A stream that declares nothing is cut off by what arrives.
        let chunks = futures::stream::iter((0..10).map(|_| {
            Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from(vec![1u8; 4])))
        }));
        let streamed = http_body_util::StreamBody::new(chunks);
        let err = read_request(streamed, limit(10)).await.unwrap_err();
        assert_eq!(over(err), (12, None));
    }
}

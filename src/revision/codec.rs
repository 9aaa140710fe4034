//! Pure encoding of a [`RevisionRecord`] into self-checking chunks: JSON, gzip, cut.

use std::io::{Read, Write};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest, Sha256};

use super::{RevisionError, RevisionRecord};

/// Compressed bytes per chunk: well under the 1 MiB a Secret may hold.
pub const CHUNK_SIZE: usize = 768 * 1024;
/// The storage format this pallet writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Start of every chunk header.
const MAGIC: &str = "pallet-revision/";
/// Largest inflated record accepted; guards against a hostile Secret inflating without bound.
const MAX_INFLATED: u64 = 1 << 30;

/// The header fields of one chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChunkHeader {
    /// Format version as written.
    pub version: String,
    /// Index of this chunk.
    pub index: usize,
    /// Number of chunks of the blob.
    pub count: usize,
    /// Hex sha256 of the whole compressed blob.
    pub sha256: String,
}

/// Encodes `record` into chunks of at most [`CHUNK_SIZE`] compressed bytes each.
pub fn encode(record: &RevisionRecord) -> Result<Vec<Vec<u8>>, RevisionError> {
    encode_with_chunk_size(record, CHUNK_SIZE)
}

/// Like [`encode`] with another chunk size (tests use small ones); `chunk_size` 0 counts as 1.
pub fn encode_with_chunk_size(
    record: &RevisionRecord,
    chunk_size: usize,
) -> Result<Vec<Vec<u8>>, RevisionError> {
    let invalid = |detail: String| RevisionError::Invalid {
        bundle_deployment: record.bundle_deployment.clone(),
        number: record.number,
        detail,
    };
    let json = serde_json::to_vec(record).map_err(|e| invalid(format!("serializing: {e}")))?;
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&json)
        .map_err(|e| invalid(format!("compressing: {e}")))?;
    let blob = gz
        .finish()
        .map_err(|e| invalid(format!("compressing: {e}")))?;
    let sha256 = hex_sha256(&blob);
    let pieces: Vec<&[u8]> = blob.chunks(chunk_size.max(1)).collect();
    let count = pieces.len();
    Ok(pieces
        .into_iter()
        .enumerate()
        .map(|(index, piece)| {
            let mut chunk =
                format!("{MAGIC}{FORMAT_VERSION} {index} {count} {sha256}\n").into_bytes();
            chunk.extend_from_slice(piece);
            chunk
        })
        .collect())
}

/// Decodes chunks made by [`encode`], given in order, verifying that they are every chunk of one
/// blob, that the blob has the digest its headers name, and that it inflates to a record.
pub fn decode(chunks: &[Vec<u8>]) -> Result<RevisionRecord, RevisionError> {
    let corrupt = |chunk: Option<usize>, detail: String| RevisionError::Corrupt {
        bundle_deployment: None,
        number: None,
        secret: None,
        chunk,
        detail,
    };
    if chunks.is_empty() {
        return Err(corrupt(None, "no chunks".into()));
    }
    let mut blob = Vec::with_capacity(chunks.iter().map(Vec::len).sum());
    let mut first: Option<ChunkHeader> = None;
    for (position, chunk) in chunks.iter().enumerate() {
        let (header, payload) = split_chunk(chunk).map_err(|d| corrupt(Some(position), d))?;
        if header.version != FORMAT_VERSION.to_string() {
            return Err(RevisionError::UnsupportedFormat {
                bundle_deployment: None,
                number: None,
                secret: None,
                version: header.version,
            });
        }
        if header.index != position {
            return Err(corrupt(
                Some(position),
                format!(
                    "chunk {} of {} found at position {position}",
                    header.index, header.count
                ),
            ));
        }
        match &first {
            None => {
                if header.count != chunks.len() {
                    return Err(corrupt(
                        Some(position),
                        format!(
                            "the blob has {} chunks, {} given",
                            header.count,
                            chunks.len()
                        ),
                    ));
                }
                first = Some(header);
            }
            Some(first) => {
                if header.count != first.count || header.sha256 != first.sha256 {
                    return Err(corrupt(
                        Some(position),
                        format!(
                            "belongs to another blob (sha256 {}, {} chunks) than chunk 0 (sha256 {}, {} chunks)",
                            header.sha256, header.count, first.sha256, first.count
                        ),
                    ));
                }
            }
        }
        blob.extend_from_slice(payload);
    }
    let expected = first.map(|h| h.sha256).unwrap_or_default();
    let actual = hex_sha256(&blob);
    if actual != expected {
        return Err(corrupt(
            None,
            format!("the compressed blob has sha256 {actual}, its headers say {expected}"),
        ));
    }
    let mut json = Vec::new();
    GzDecoder::new(blob.as_slice())
        .take(MAX_INFLATED)
        .read_to_end(&mut json)
        .map_err(|e| corrupt(None, format!("inflating: {e}")))?;
    serde_json::from_slice(&json).map_err(|e| corrupt(None, format!("parsing the record: {e}")))
}

/// Splits a chunk into its header and payload.
pub(crate) fn split_chunk(chunk: &[u8]) -> Result<(ChunkHeader, &[u8]), String> {
    let end = chunk
        .iter()
        .take(200)
        .position(|&b| b == b'\n')
        .ok_or("no chunk header (not written by pallet?)")?;
    let line = std::str::from_utf8(&chunk[..end]).map_err(|_| "chunk header is not UTF-8")?;
    let rest = line
        .strip_prefix(MAGIC)
        .ok_or_else(|| format!("chunk header {line:?} does not start with {MAGIC:?}"))?;
    let fields: Vec<&str> = rest.split(' ').collect();
    let bad = || format!("malformed chunk header {line:?}");
    let [version, index, count, sha256] = fields.as_slice() else {
        return Err(bad());
    };
    let header = ChunkHeader {
        version: (*version).to_string(),
        index: index.parse().map_err(|_| bad())?,
        count: count.parse().map_err(|_| bad())?,
        sha256: (*sha256).to_string(),
    };
    if header.count == 0 || header.index >= header.count {
        return Err(bad());
    }
    Ok((header, &chunk[end + 1..]))
}

/// Lower-case hex sha256 of `bytes`.
pub(crate) fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ResolvedSource, SourceKind};
    use serde_json::json;

    fn record(objects: usize, filler: usize) -> RevisionRecord {
        // Varied text so that compression leaves something to cut into chunks.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut text = |len: usize| {
            (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    char::from(b'a' + (state % 26) as u8)
                })
                .collect::<String>()
        };
        RevisionRecord {
            bundle_deployment: "web".into(),
            number: 3,
            generation: 7,
            digest: "sha256:abc".into(),
            sources: vec![ResolvedSource {
                kind: SourceKind::Git,
                reference: "main".into(),
                resolved: "3f9c2e1".into(),
                version: None,
                verified: None,
            }],
            objects: (0..objects)
                .map(|i| {
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": format!("cm-{i}"), "namespace": "web"},
                           "data": {"text": text(filler)}})
                })
                .collect(),
            processors: vec![],
        }
    }

    #[test]
    fn round_trip_in_one_chunk() {
        let r = record(3, 10);
        let chunks = encode(&r).unwrap();
        assert_eq!(chunks.len(), 1);
        assert_eq!(decode(&chunks).unwrap(), r);
    }

    #[test]
    fn encoding_is_deterministic() {
        let r = record(5, 100);
        assert_eq!(encode(&r).unwrap(), encode(&r).unwrap());
    }

    #[test]
    fn round_trip_in_many_chunks() {
        let r = record(20, 2000);
        let chunks = encode_with_chunk_size(&r, 4096).unwrap();
        assert!(chunks.len() >= 5, "{} chunks", chunks.len());
        for (i, chunk) in chunks.iter().enumerate() {
            let (header, payload) = split_chunk(chunk).unwrap();
            assert_eq!(header.index, i);
            assert_eq!(header.count, chunks.len());
            assert!(payload.len() <= 4096);
        }
        assert_eq!(decode(&chunks).unwrap(), r);
    }

    #[test]
    fn a_flipped_byte_is_caught() {
        let r = record(20, 2000);
        let mut chunks = encode_with_chunk_size(&r, 4096).unwrap();
        let last = chunks[2].len() - 1;
        chunks[2][last] ^= 0x01;
        let e = decode(&chunks).unwrap_err();
        assert!(matches!(e, RevisionError::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("sha256"), "{e}");
    }

    #[test]
    fn a_missing_chunk_is_caught() {
        let r = record(20, 2000);
        let mut chunks = encode_with_chunk_size(&r, 4096).unwrap();
        let n = chunks.len();
        chunks.pop();
        let e = decode(&chunks).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("the blob has {n} chunks, {} given", n - 1)),
            "{e}"
        );
        chunks.remove(1);
        let e = decode(&chunks).unwrap_err();
        assert!(
            matches!(e, RevisionError::Corrupt { chunk: Some(_), .. }),
            "{e}"
        );
    }

    #[test]
    fn chunks_in_the_wrong_order_are_caught() {
        let r = record(20, 2000);
        let mut chunks = encode_with_chunk_size(&r, 4096).unwrap();
        chunks.swap(1, 2);
        let e = decode(&chunks).unwrap_err();
        assert!(
            matches!(e, RevisionError::Corrupt { chunk: Some(1), .. }),
            "{e}"
        );
        assert!(e.to_string().contains("chunk 2 of"), "{e}");
    }

    #[test]
    fn chunks_of_two_blobs_do_not_mix() {
        let a = encode_with_chunk_size(&record(20, 2000), 4096).unwrap();
        let mut other = record(20, 2000);
        other.number = 4;
        let b = encode_with_chunk_size(&other, 4096).unwrap();
        assert_eq!(a.len(), b.len());
        let mut mixed = a.clone();
        mixed[1] = b[1].clone();
        let e = decode(&mixed).unwrap_err();
        assert!(e.to_string().contains("belongs to another blob"), "{e}");
    }

    #[test]
    fn garbage_and_other_formats_are_refused() {
        let e = decode(&[b"hello".to_vec()]).unwrap_err();
        assert!(e.to_string().contains("no chunk header"), "{e}");
        let e = decode(&[]).unwrap_err();
        assert!(e.to_string().contains("no chunks"), "{e}");
        let mut chunk = encode(&record(1, 1)).unwrap().remove(0);
        chunk[MAGIC.len()] = b'9';
        let e = decode(&[chunk]).unwrap_err();
        assert!(
            matches!(&e, RevisionError::UnsupportedFormat { version, .. } if version == "9"),
            "{e}"
        );
        assert_eq!(e.category(), "RevisionFormatUnsupported");
    }

    #[test]
    fn a_blob_that_does_not_inflate_is_corrupt() {
        let blob = b"not gzip at all".to_vec();
        let mut chunk = format!("{MAGIC}1 0 1 {}\n", hex_sha256(&blob)).into_bytes();
        chunk.extend_from_slice(&blob);
        let e = decode(&[chunk]).unwrap_err();
        assert!(e.to_string().contains("inflating"), "{e}");
    }
}

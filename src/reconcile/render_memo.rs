//! Unchanged content is not rendered again. A render is a pure function of its inputs: the
//! resolved sources (immutable refs), the format and the render configuration (values, release
//! name, namespace, helm capabilities, clock and seed). The last render of each BundleDeployment
//! is kept with the digest of those inputs; a pass with the same inputs (a requeue, drift, a
//! status change) reuses it, or its refusal, without assembling the tree or rendering. This also
//! keeps a refused oversized bundle from being rendered again at every requeue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pallet_formats::processors::{NamedProcessor, ProcessorTrace};
use pallet_formats::{Format, Object, Origin, RenderConfig, Rendered, RenderedObject, Scope};
use sha2::{Digest, Sha256};

use crate::source::Fetched;

/// A kept render: the objects and their digest, or why the render was refused.
#[derive(Clone, Debug)]
pub enum KeptRender {
    /// Rendered.
    Objects {
        /// The rendered set (shared: it may be large).
        rendered: Arc<Rendered>,
        /// Its canonical digest.
        digest: String,
        /// What each processor did.
        traces: Arc<Vec<ProcessorTrace>>,
    },
    /// Refused (bad content, which the same inputs would refuse again).
    Refused {
        /// The error's category.
        category: &'static str,
        /// The error's message.
        message: String,
    },
}

/// The digest of everything a render depends on (`allow_empty`: whether an empty render is
/// accepted, which decides between a refusal and an empty set).
pub fn inputs_digest(
    format: Format,
    config: &RenderConfig,
    processors: &[NamedProcessor],
    allow_empty: bool,
    sources: &[Fetched],
) -> String {
    let mut hasher = Sha256::new();
    hasher.update(format!("{}\nallowEmpty={allow_empty}", format.name()));
    // The configuration's Debug form holds every field (values, capabilities, clock, seed);
    // its maps are ordered, so equal configurations give equal text. The same for processors.
    hasher.update(format!("\n{config:?}\n"));
    if !processors.is_empty() {
        hasher.update(format!("{processors:?}\n"));
    }
    for source in sources {
        hasher.update(format!("{}\t{}\n", source.destination, source.resolved));
    }
    format!("sha256:{:x}", hasher.finalize())
}

/// The last render of each BundleDeployment (by uid), with the digest of its inputs.
#[derive(Default)]
pub struct RenderMemo {
    kept: Mutex<HashMap<String, (String, Stored)>>,
}

/// A render as the memo holds it: objects as JSON text. A decoded JSON tree takes several times
/// the memory of its text, and the memo holds one render per BundleDeployment for as long as it
/// is current; decoding a bundle's objects on a hit costs far less than rendering them.
enum Stored {
    Objects {
        objects: Vec<(Box<[u8]>, Origin, Scope)>,
        install_namespace: String,
        webhook_certificates: Vec<pallet_formats::WebhookCertificate>,
        digest: String,
        traces: Arc<Vec<ProcessorTrace>>,
    },
    Refused {
        category: &'static str,
        message: String,
    },
}

impl Stored {
    /// None when an object does not encode (not expected: it was decoded from text).
    fn pack(render: KeptRender) -> Option<Stored> {
        Some(match render {
            KeptRender::Objects {
                rendered,
                digest,
                traces,
            } => Stored::Objects {
                objects: rendered
                    .objects
                    .iter()
                    .map(|o| {
                        let json = serde_json::to_vec(o.object.body()).ok()?;
                        Some((json.into(), o.object.origin().clone(), o.scope))
                    })
                    .collect::<Option<_>>()?,
                install_namespace: rendered.install_namespace.clone(),
                webhook_certificates: rendered.webhook_certificates.clone(),
                digest,
                traces,
            },
            KeptRender::Refused { category, message } => Stored::Refused { category, message },
        })
    }

    /// None when an object does not decode (then it is rendered again).
    fn unpack(&self) -> Option<KeptRender> {
        Some(match self {
            Stored::Objects {
                objects,
                install_namespace,
                webhook_certificates,
                digest,
                traces,
            } => KeptRender::Objects {
                rendered: Arc::new(Rendered {
                    objects: objects
                        .iter()
                        .map(|(json, origin, scope)| {
                            let body = serde_json::from_slice(json).ok()?;
                            let object = Object::new(body, origin.clone()).ok()?;
                            Some(RenderedObject {
                                object,
                                scope: *scope,
                            })
                        })
                        .collect::<Option<_>>()?,
                    install_namespace: install_namespace.clone(),
                    webhook_certificates: webhook_certificates.clone(),
                }),
                digest: digest.clone(),
                traces: traces.clone(),
            },
            Stored::Refused { category, message } => KeptRender::Refused {
                category,
                message: message.clone(),
            },
        })
    }
}

impl RenderMemo {
    /// The render kept for `uid` when it was made from `inputs`.
    pub fn get(&self, uid: &str, inputs: &str) -> Option<KeptRender> {
        let kept = self.lock();
        kept.get(uid)
            .filter(|(digest, _)| digest == inputs)
            .and_then(|(_, stored)| stored.unpack())
    }

    /// Keeps `render`, made from `inputs`, for `uid` (replacing the previous one).
    pub fn put(&self, uid: &str, inputs: String, render: KeptRender) {
        let mut kept = self.lock();
        match Stored::pack(render) {
            Some(stored) => kept.insert(uid.to_string(), (inputs, stored)),
            None => kept.remove(uid),
        };
    }

    /// Forgets the render of `uid` (it is being deleted).
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Stored)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SourceKind;
    use std::path::PathBuf;

    fn fetched(resolved: &str) -> Fetched {
        Fetched {
            kind: SourceKind::Git,
            reference: "main".into(),
            resolved: resolved.into(),
            destination: String::new(),
            path: PathBuf::new(),
            version: None,
            verified: None,
        }
    }

    #[test]
    fn the_inputs_digest_follows_sources_and_config() {
        let config = RenderConfig::default();
        let digest = |format, config: &RenderConfig, allow, resolved| {
            inputs_digest(format, config, &[], allow, &[fetched(resolved)])
        };
        let a = digest(Format::Plain, &config, false, "c1");
        assert_eq!(a, digest(Format::Plain, &config, false, "c1"));
        assert_ne!(a, digest(Format::Plain, &config, false, "c2"));
        assert_ne!(a, digest(Format::Helm, &config, false, "c1"));
        assert_ne!(a, digest(Format::Plain, &config, true, "c1"));
        let mut other = RenderConfig::default();
        other.helm.values = serde_json::json!({"replicas": 2});
        assert_ne!(a, digest(Format::Plain, &other, false, "c1"));
        let processors = [NamedProcessor {
            name: "0-substitute".into(),
            processor: pallet_formats::processors::Processor::Substitute(Default::default()),
        }];
        assert_ne!(
            a,
            inputs_digest(Format::Plain, &config, &processors, false, &[fetched("c1")])
        );
    }

    #[test]
    fn a_kept_render_comes_back_as_it_was_rendered() {
        let rendered = pallet_formats::parse_manifests(
            "dir/objects.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: \"0644\"}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b, namespace: x}\nspec: {replicas: 2}\n",
        )
        .unwrap();
        let rendered = Rendered {
            objects: rendered
                .into_iter()
                .map(|object| RenderedObject {
                    object,
                    scope: Scope::Unknown,
                })
                .collect(),
            install_namespace: "team".into(),
            webhook_certificates: vec![],
        };
        let memo = RenderMemo::default();
        let kept = KeptRender::Objects {
            rendered: Arc::new(rendered.clone()),
            digest: "sha256:x".into(),
            traces: Arc::new(vec![ProcessorTrace {
                processor: "p".into(),
                ..Default::default()
            }]),
        };
        memo.put("uid", "in".into(), kept);
        match memo.get("uid", "in") {
            Some(KeptRender::Objects {
                rendered: back,
                digest,
                traces,
            }) => {
                assert_eq!(*back, rendered);
                assert_eq!(traces[0].processor, "p");
                assert_eq!(digest, "sha256:x");
            }
            _ => panic!("not kept"),
        }
    }

    #[test]
    fn a_render_is_reused_for_the_same_inputs_only() {
        let memo = RenderMemo::default();
        let kept = KeptRender::Refused {
            category: "ObjectTooLarge",
            message: "too big".into(),
        };
        memo.put("uid", "in1".into(), kept);
        assert!(matches!(
            memo.get("uid", "in1"),
            Some(KeptRender::Refused {
                category: "ObjectTooLarge",
                ..
            })
        ));
        assert!(memo.get("uid", "in2").is_none());
        assert!(memo.get("other", "in1").is_none());
        memo.forget("uid");
        assert!(memo.get("uid", "in1").is_none());
    }
}

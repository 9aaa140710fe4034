//! Unchanged content is not rendered again. A render is a pure function of its inputs: the
//! resolved sources (immutable refs), the format and the render configuration (values, release
//! name, namespace, helm capabilities, clock and seed). The last render of each BundleDeployment
//! is kept with the digest of those inputs; a pass with the same inputs (a requeue, drift, a
//! status change) reuses it, or its refusal, without assembling the tree or rendering. This also
//! keeps a refused oversized bundle from being rendered again at every requeue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pallet_formats::{Format, RenderConfig, Rendered};
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
    allow_empty: bool,
    sources: &[Fetched],
) -> String {
    let mut hasher = Sha256::new();
    hasher.update(format!("{}\nallowEmpty={allow_empty}", format.name()));
    // The configuration's Debug form holds every field (values, capabilities, clock, seed);
    // its maps are ordered, so equal configurations give equal text.
    hasher.update(format!("\n{config:?}\n"));
    for source in sources {
        hasher.update(format!("{}\t{}\n", source.destination, source.resolved));
    }
    format!("sha256:{:x}", hasher.finalize())
}

/// The last render of each BundleDeployment (by uid), with the digest of its inputs.
#[derive(Default)]
pub struct RenderMemo {
    kept: Mutex<HashMap<String, (String, KeptRender)>>,
}

impl RenderMemo {
    /// The render kept for `uid` when it was made from `inputs`.
    pub fn get(&self, uid: &str, inputs: &str) -> Option<KeptRender> {
        let kept = self.lock();
        kept.get(uid)
            .filter(|(digest, _)| digest == inputs)
            .map(|(_, render)| render.clone())
    }

    /// Keeps `render`, made from `inputs`, for `uid` (replacing the previous one).
    pub fn put(&self, uid: &str, inputs: String, render: KeptRender) {
        self.lock().insert(uid.to_string(), (inputs, render));
    }

    /// Forgets the render of `uid` (it is being deleted).
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, KeptRender)>> {
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
        }
    }

    #[test]
    fn the_inputs_digest_follows_sources_and_config() {
        let config = RenderConfig::default();
        let digest = |format, config: &RenderConfig, allow, resolved| {
            inputs_digest(format, config, allow, &[fetched(resolved)])
        };
        let a = digest(Format::Plain, &config, false, "c1");
        assert_eq!(a, digest(Format::Plain, &config, false, "c1"));
        assert_ne!(a, digest(Format::Plain, &config, false, "c2"));
        assert_ne!(a, digest(Format::Helm, &config, false, "c1"));
        assert_ne!(a, digest(Format::Plain, &config, true, "c1"));
        let mut other = RenderConfig::default();
        other.helm.values = serde_json::json!({"replicas": 2});
        assert_ne!(a, digest(Format::Plain, &other, false, "c1"));
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

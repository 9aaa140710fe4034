//! What parent and child exchange: the request on the child's standard input, the reply on its
//! standard output, both JSON.

use std::path::PathBuf;

use pallet_formats::processors::{NamedProcessor, ProcessorTrace, Progress};
use pallet_formats::{
    Format, Object, Origin, RenderConfig, RenderError, Rendered, RenderedObject, Scope,
    WebhookCertificate,
};
use serde::{Deserialize, Serialize};

use crate::reconcile::render::{RenderStep, Resume};

/// One render: the tree, its format and configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RenderRequest {
    /// The assembled bundle tree.
    pub tree: PathBuf,
    /// Its format.
    pub format: Format,
    /// Whether a render with no objects is accepted.
    pub allow_empty: bool,
    /// The format's configuration, budgets included.
    pub config: RenderConfig,
    /// The processors to run on the format's output.
    pub processors: Vec<NamedProcessor>,
    /// Where to go on from, when a function processor was called between two steps.
    pub resume: Option<Resume>,
}

/// The child's answer.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Reply {
    /// The rendered objects, and what each processor did.
    Rendered(WireRendered, Vec<ProcessorTrace>),
    /// A function processor must be called before the render can go on.
    Function {
        /// The processor's index.
        index: usize,
        /// The ResourceList to send.
        request: serde_json::Value,
        /// Where the processors stand.
        progress: Progress,
    },
    /// The content was refused: the error's category and message.
    Refused {
        /// CamelCase category.
        category: String,
        /// The message.
        message: String,
    },
    /// The tree could not be read (may pass: not remembered).
    ReadFailed {
        /// The message.
        message: String,
    },
    /// The chart looks up objects the request gave no answer for.
    Lookups(Vec<pallet_formats::LookupKey>),
}

impl Reply {
    /// The reply for a render step's result.
    pub(super) fn of(result: Result<RenderStep, RenderError>) -> Reply {
        match result {
            Ok(RenderStep::Done { rendered, traces }) => {
                Reply::Rendered(WireRendered::from(rendered), traces)
            }
            Ok(RenderStep::Function {
                index,
                request,
                progress,
            }) => Reply::Function {
                index,
                request,
                progress,
            },
            Ok(RenderStep::Lookups { keys }) => Reply::Lookups(keys),
            Err(error @ RenderError::Io { .. }) => Reply::ReadFailed {
                message: error.to_string(),
            },
            Err(error) => Reply::Refused {
                category: error.category().to_string(),
                message: error.to_string(),
            },
        }
    }
}

/// [`Rendered`] as sent.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct WireRendered {
    objects: Vec<WireObject>,
    install_namespace: String,
    webhook_certificates: Vec<WebhookCertificate>,
}

#[derive(Debug, Serialize, Deserialize)]
struct WireObject {
    body: serde_json::Map<String, serde_json::Value>,
    origin: Origin,
    scope: Scope,
}

impl From<Rendered> for WireRendered {
    fn from(rendered: Rendered) -> Self {
        WireRendered {
            objects: rendered
                .objects
                .into_iter()
                .map(|o| {
                    let origin = o.object.origin().clone();
                    WireObject {
                        body: o.object.into_body(),
                        origin,
                        scope: o.scope,
                    }
                })
                .collect(),
            install_namespace: rendered.install_namespace,
            webhook_certificates: rendered.webhook_certificates,
        }
    }
}

impl WireRendered {
    /// The rendered set, each object checked again as it is rebuilt.
    pub(super) fn into_rendered(self) -> Result<Rendered, RenderError> {
        Ok(Rendered {
            objects: self
                .objects
                .into_iter()
                .map(|o| {
                    Ok(RenderedObject {
                        object: Object::new(serde_json::Value::Object(o.body), o.origin)?,
                        scope: o.scope,
                    })
                })
                .collect::<Result<_, RenderError>>()?,
            install_namespace: self.install_namespace,
            webhook_certificates: self.webhook_certificates,
        })
    }
}

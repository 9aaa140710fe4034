//! TEMPORARY STUB (replaced by branch `store`).
#![allow(missing_docs)]
use serde::{Deserialize, Serialize};
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RevisionRecord {
    pub bundle_deployment: String,
    pub number: i64,
    pub generation: i64,
    pub digest: String,
    pub sources: Vec<crate::api::ResolvedSource>,
    pub objects: Vec<serde_json::Value>,
}
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    #[error("not found")]
    NotFound {},
}
impl RevisionError {
    pub fn category(&self) -> &'static str {
        "RevisionNotFound"
    }
    pub fn is_transient(&self) -> bool {
        false
    }
}
#[derive(Clone)]
pub struct RevisionStore {
    _client: kube::Client,
    _namespace: String,
}
impl RevisionStore {
    pub fn new(client: kube::Client, namespace: impl Into<String>) -> Self {
        Self {
            _client: client,
            _namespace: namespace.into(),
        }
    }
    pub async fn save(&self, _record: &RevisionRecord) -> Result<(), RevisionError> {
        Ok(())
    }
    pub async fn load(&self, _bd: &str, _number: i64) -> Result<RevisionRecord, RevisionError> {
        Err(RevisionError::NotFound {})
    }
    pub async fn list(&self, _bd: &str) -> Result<Vec<i64>, RevisionError> {
        Ok(vec![])
    }
    pub async fn delete(&self, _bd: &str, _number: i64) -> Result<(), RevisionError> {
        Ok(())
    }
    pub async fn delete_all(&self, _bd: &str) -> Result<(), RevisionError> {
        Ok(())
    }
}

//! Helm's `lookup` against the live cluster, read as the BundleDeployment's ServiceAccount (as
//! `helm install` and Flux's helm-controller read it with their own credentials).
//!
//! The render itself runs sandboxed and never talks to the cluster: a render given the answers
//! it has so far ([`Lookups::Answers`]) fails with [`RenderError::LookupsNeeded`] naming every
//! lookup it made without one; the agent reads those here and renders again with them, until a
//! render asks for nothing new (a lookup may depend on another's answer). The answers are part
//! of the render's inputs, so an unchanged cluster gives the same render (and digest), and the
//! render memo is keyed by them too. Which lookups a chart made last is remembered per
//! BundleDeployment, so that the next pass reads them before it renders.
//!
//! Secrets and ConfigMaps follow the reference rule of `valuesFrom` (see
//! [`super::fetch::may_use`]): in the agent's namespace only objects labelled for this
//! BundleDeployment (never the agent's own render keys or revision snapshots); elsewhere those of
//! an allow-listed namespace or that its ServiceAccount may get; and, for a BundleDeployment that
//! names no ServiceAccount, those of its own `installNamespace` (see `in_own_namespace`). A
//! lookup the rule refuses, or the ServiceAccount may not make, fails the render as it fails
//! `helm install`.
//!
//! Lists are read in pages ([`LIST_PAGE`] objects, `limit` and `continue`) and capped, per call
//! and over all the lookups of one render, in objects and in bytes ([`LookupLimits`]): a
//! lookup over a huge list fails (`LookupFailed`) naming the bound, without the rest of the
//! list being read.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::discovery::{pinned_kind, Scope};
use kube::{Client, ResourceExt};
use pallet_formats::{LookupAnswer, LookupKey, Lookups, RenderError};
use serde_json::{json, Value};

use super::fetch::{may_use, Found, SecretPolicy};
use super::ReconcileError;
use crate::api::BundleDeployment;

/// At most this many renders of one pass for lookups (a chain of lookups each depending on the
/// last is that deep at most).
pub const MAX_ROUNDS: usize = 8;
/// At most this many lookups in one render.
pub const MAX_LOOKUPS: usize = 256;

/// The category of a lookup the cluster refused or the reference rule does not allow (lasting).
pub const LOOKUP_FAILED: &str = "LookupFailed";

/// Objects asked for per page of a list.
pub const LIST_PAGE: u32 = 50;

/// What a chart's lookups may read: per call (one `lookup`) and per render (all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupLimits {
    /// Objects one lookup may return.
    pub call_objects: u64,
    /// Bytes (as JSON) one lookup may return.
    pub call_bytes: u64,
    /// Objects all the lookups of one render may return.
    pub render_objects: u64,
    /// Bytes (as JSON) all the lookups of one render may return.
    pub render_bytes: u64,
}

impl LookupLimits {
    /// The defaults: 1,000 objects and 8 MiB a call, 5,000 objects and 32 MiB a render (the
    /// answers are the render's input, and a render has `--render-memory-mib`, 256, for all).
    pub const DEFAULT: LookupLimits = LookupLimits {
        call_objects: 1_000,
        call_bytes: 8 << 20,
        render_objects: 5_000,
        render_bytes: 32 << 20,
    };
}

impl Default for LookupLimits {
    fn default() -> Self {
        LookupLimits::DEFAULT
    }
}

/// What the lookups of one render have read so far.
#[derive(Debug, Default)]
struct Used {
    objects: u64,
    bytes: u64,
}

/// Counts what one lookup returns against its call's and its render's limits.
struct Tally<'a> {
    key: &'a LookupKey,
    limits: LookupLimits,
    render: &'a Mutex<Used>,
    objects: u64,
    bytes: u64,
}

impl Tally<'_> {
    /// Counts one object of `bytes`; past a limit, the refusal naming it.
    fn add(&mut self, bytes: u64) -> Result<(), ReconcileError> {
        self.objects += 1;
        self.bytes += bytes;
        let limits = self.limits;
        let mut render = self.render.lock().unwrap_or_else(|p| p.into_inner());
        let call = (self.objects, self.bytes);
        let checks = [
            (
                call.0,
                limits.call_objects,
                "objects",
                "",
                "the per-lookup object limit (--lookup-max-objects)",
            ),
            (
                call.1,
                limits.call_bytes,
                "bytes",
                "",
                "the per-lookup byte limit (--lookup-max-mib)",
            ),
            (
                render.objects + 1,
                limits.render_objects,
                "objects",
                " with the render's other lookups",
                "the per-render lookup object limit (--lookup-render-max-objects)",
            ),
            (
                render.bytes + bytes,
                limits.render_bytes,
                "bytes",
                " with the render's other lookups",
                "the per-render lookup byte limit (--lookup-render-max-mib)",
            ),
        ];
        for (value, limit, unit, with, budget) in checks {
            if value > limit {
                return Err(failed(
                    self.key,
                    format!("refused: more than {limit} {unit}{with}, over {budget} of {limit}"),
                ));
            }
        }
        render.objects += 1;
        render.bytes += bytes;
        Ok(())
    }
}

/// The lookups each BundleDeployment's last render made, by uid.
#[derive(Default)]
pub struct LastLookups(Mutex<HashMap<String, Vec<LookupKey>>>);

impl LastLookups {
    /// The lookups `uid`'s last render made (none known: none).
    pub fn get(&self, uid: &str) -> Vec<LookupKey> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .cloned()
            .unwrap_or_default()
    }

    /// Records the lookups of `uid`'s last render.
    pub fn set(&self, uid: &str, keys: Vec<LookupKey>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if keys.is_empty() {
            map.remove(uid);
        } else {
            map.insert(uid.to_string(), keys);
        }
    }

    /// Forgets a deleted BundleDeployment.
    pub fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(uid);
    }
}

/// Who reads: the ServiceAccount's client (the agent's own when the BundleDeployment acts as
/// the agent), the agent's client (for the reference rule's reads and reviews) and the rule;
/// and what one render's lookups may read, with what they read so far.
pub struct Reader<'a> {
    /// Reads as the BundleDeployment's ServiceAccount.
    pub acting: &'a Client,
    /// The agent's own client.
    pub agent: &'a Client,
    /// The Secret and ConfigMap reference rule.
    pub policy: &'a SecretPolicy,
    /// The BundleDeployment.
    pub bd: &'a BundleDeployment,
    limits: LookupLimits,
    used: Mutex<Used>,
}

impl<'a> Reader<'a> {
    /// A reader for one render's lookups, under `limits`.
    pub fn new(
        acting: &'a Client,
        agent: &'a Client,
        policy: &'a SecretPolicy,
        bd: &'a BundleDeployment,
        limits: LookupLimits,
    ) -> Reader<'a> {
        Reader {
            acting,
            agent,
            policy,
            bd,
            limits,
            used: Mutex::default(),
        }
    }

    /// A reader for one render's lookups of a pass over `bd`, acting as `acting`, under the
    /// agent's limits.
    pub fn of(
        ctx: &'a super::Context,
        workload: &'a super::workload::Workload,
        bd: &'a BundleDeployment,
    ) -> Self {
        Reader::new(
            &workload.writer,
            &workload.client,
            &workload.lookup_policy,
            bd,
            ctx.rendering.lookup_limits,
        )
    }

    fn tally<'k>(&'k self, key: &'k LookupKey) -> Tally<'k> {
        Tally {
            key,
            limits: self.limits,
            render: &self.used,
            objects: 0,
            bytes: 0,
        }
    }

    /// Every object of a list, page by page, counted as each page arrives; `keep` filters
    /// what is returned (and counted).
    async fn list_paged(
        &self,
        key: &LookupKey,
        api: &Api<DynamicObject>,
        keep: impl Fn(&DynamicObject) -> bool,
    ) -> Result<Vec<Value>, ReconcileError> {
        let mut tally = self.tally(key);
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut params = ListParams::default().limit(LIST_PAGE);
            if let Some(token) = &token {
                params = params.continue_token(token);
            }
            let page = api.list(&params).await.map_err(|e| kube_failure(key, e))?;
            for item in page.items.into_iter().filter(|item| keep(item)) {
                let value = with_type(item, &key.api_version, &key.kind);
                tally.add(json_size(&value))?;
                items.push(value);
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(items);
            }
        }
    }
}

/// The size of `value` as JSON, as the render receives it.
fn json_size(value: &Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

impl Reader<'_> {
    /// The answers to `keys`, asked for by a render whose lookups so far are `known` (of
    /// BundleDeployment `uid`, remembered in `last`). A refusal remembers them all with `keys`:
    /// the next pass reads them first and fails before it renders again.
    pub async fn read_remembered(
        &self,
        keys: &[LookupKey],
        (known, last, uid): (&Lookups, &LastLookups, &str),
    ) -> Result<Vec<LookupAnswer>, ReconcileError> {
        let read = self.read(keys).await;
        if read.is_err() {
            let mut all = self::keys(known);
            all.extend(keys.iter().cloned());
            last.set(uid, all);
        }
        read
    }

    /// The answers to `keys`, in order.
    pub async fn read(&self, keys: &[LookupKey]) -> Result<Vec<LookupAnswer>, ReconcileError> {
        let mut answers = Vec::with_capacity(keys.len());
        for key in keys {
            answers.push(LookupAnswer {
                key: key.clone(),
                answer: self.read_one(key).await?,
            });
        }
        Ok(answers)
    }

    async fn read_one(&self, key: &LookupKey) -> Result<Value, ReconcileError> {
        let (group, version) = match key.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", key.api_version.as_str()),
        };
        let gvk = GroupVersionKind::gvk(group, version, &key.kind);
        let (resource, capabilities) = pinned_kind(self.acting, &gvk)
            .await
            .map_err(|e| failed(key, format!("the cluster does not serve it: {e}")))?;
        let namespaced = capabilities.scope == Scope::Namespaced;
        let guarded = group.is_empty() && matches!(key.kind.as_str(), "Secret" | "ConfigMap");
        let plural = resource.plural.clone();
        let api: Api<DynamicObject> = match (namespaced, key.namespace.as_str()) {
            (true, "") => Api::all_with(self.acting.clone(), &resource),
            (true, namespace) => Api::namespaced_with(self.acting.clone(), namespace, &resource),
            (false, _) => Api::all_with(self.acting.clone(), &resource),
        };
        if key.name.is_empty() {
            let items = if guarded {
                self.guarded_list(key, &plural, &resource).await?
            } else {
                self.list_paged(key, &api, |_| true).await?
            };
            return Ok(json!({
                "apiVersion": key.api_version,
                "kind": format!("{}List", key.kind),
                "metadata": {},
                "items": items,
            }));
        }
        let found = if guarded {
            self.guarded_get(key, &plural, &resource).await?
        } else {
            api.get_opt(&key.name)
                .await
                .map_err(|e| kube_failure(key, e))?
        };
        let Some(object) = found else {
            return Ok(json!({}));
        };
        let value = with_type(object, &key.api_version, &key.kind);
        self.tally(key).add(json_size(&value))?;
        Ok(value)
    }

    /// A Secret or ConfigMap by name, under the reference rule.
    async fn guarded_get(
        &self,
        key: &LookupKey,
        plural: &str,
        resource: &kube::discovery::ApiResource,
    ) -> Result<Option<DynamicObject>, ReconcileError> {
        let name = self.bd.name_any();
        let requester = self.policy.requester(&name, &self.bd.spec);
        let agents: Api<DynamicObject> =
            Api::namespaced_with(self.agent.clone(), &key.namespace, resource);
        let in_agent_namespace = key.namespace == self.policy.agent_namespace;
        if self.in_own_namespace(key, in_agent_namespace) {
            return agents
                .get_opt(&key.name)
                .await
                .map_err(|e| kube_failure(key, e));
        }
        let found = if in_agent_namespace {
            agents
                .get_opt(&key.name)
                .await
                .map_err(|e| kube_failure(key, e))?
        } else {
            None
        };
        let secret_type = found
            .as_ref()
            .and_then(|o| o.data.get("type"))
            .and_then(Value::as_str);
        let seen = found
            .as_ref()
            .map(|object| Found::new(&object.metadata, secret_type));
        let rule = may_use(
            self.agent,
            self.policy,
            requester,
            plural,
            &key.namespace,
            &key.name,
            seen,
        );
        if let Err(why) = rule.await? {
            return Err(failed(key, why));
        }
        if in_agent_namespace {
            return Ok(found);
        }
        agents
            .get_opt(&key.name)
            .await
            .map_err(|e| kube_failure(key, e))
    }

    /// Whether `key` is in the release's own namespace (`installNamespace`, not the agent's) of a
    /// BundleDeployment that names no ServiceAccount. Such a BundleDeployment writes its objects
    /// there as the agent already (and the admission policy admits it only from a user allowed
    /// everything), so a chart's `lookup` of a Secret there, as `helm install` makes it (a
    /// password kept across upgrades), reveals nothing it could not overwrite.
    fn in_own_namespace(&self, key: &LookupKey, in_agent_namespace: bool) -> bool {
        !in_agent_namespace
            && self.policy.service_account(&self.bd.spec).is_none()
            && self.bd.spec.install_namespace.as_deref() == Some(key.namespace.as_str())
    }

    /// A list of Secrets or ConfigMaps: read as the ServiceAccount (or, without one, only in an
    /// allow-listed namespace); those of the agent's namespace only when labelled for this
    /// BundleDeployment.
    async fn guarded_list(
        &self,
        key: &LookupKey,
        plural: &str,
        resource: &kube::discovery::ApiResource,
    ) -> Result<Vec<Value>, ReconcileError> {
        let name = self.bd.name_any();
        let has_account = self.policy.service_account(&self.bd.spec).is_some();
        let allow_listed = self.policy.allowed_namespaces.contains(&key.namespace);
        let in_agent_namespace = key.namespace == self.policy.agent_namespace;
        let own = self.in_own_namespace(key, in_agent_namespace);
        // Reads made as the requester (a remote cluster's identity, `pallet plan`): the API
        // server answers for what it may list.
        let as_requester = self.policy.reads_as_service_account;
        let client = match (has_account, allow_listed || in_agent_namespace || own || as_requester) {
            (true, _) => self.acting,
            (false, true) => self.agent,
            (false, false) => {
                return Err(failed(
                    key,
                    format!(
                        "listing {plural} outside the agent's namespace and its allow-list needs a spec.serviceAccount that may list them"
                    ),
                ))
            }
        };
        let api: Api<DynamicObject> = if key.namespace.is_empty() {
            Api::all_with(client.clone(), resource)
        } else {
            Api::namespaced_with(client.clone(), &key.namespace, resource)
        };
        let label = super::fetch::access_label(&name);
        let agent_namespace = self.policy.agent_namespace.as_str();
        self.list_paged(key, &api, |item| {
            (item.namespace().as_deref() != Some(agent_namespace)
                || item.labels().get(&label).map(String::as_str) == Some("true"))
                && !is_agents_own(item)
        })
        .await
    }
}

/// One of the agent's own Secrets (a render key or revision snapshot), never handed to a chart.
fn is_agents_own(object: &DynamicObject) -> bool {
    let secret_type = object.data.get("type").and_then(Value::as_str);
    secret_type == Some(crate::revision::SECRET_TYPE)
        || object
            .labels()
            .contains_key(crate::revision::LABEL_REVISION_OF)
        || super::render_key::is_render_key(&object.metadata, secret_type)
}

/// The object as helm's lookup returns it (its apiVersion and kind set).
fn with_type(object: DynamicObject, api_version: &str, kind: &str) -> Value {
    let mut value = serde_json::to_value(&object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(kind));
    }
    value
}

fn describe(key: &LookupKey) -> String {
    let at = match (key.namespace.as_str(), key.name.as_str()) {
        ("", "") => "in all namespaces".to_string(),
        (namespace, "") => format!("in namespace {namespace}"),
        ("", name) => name.to_string(),
        (namespace, name) => format!("{namespace}/{name}"),
    };
    format!("lookup {} {} {at}", key.api_version, key.kind)
}

fn failed(key: &LookupKey, why: String) -> ReconcileError {
    ReconcileError::RenderRefused {
        category: LOOKUP_FAILED,
        message: format!("{}: {why}", describe(key)),
    }
}

fn kube_failure(key: &LookupKey, error: kube::Error) -> ReconcileError {
    match &error {
        kube::Error::Api(status) if status.code == 403 => ReconcileError::Forbidden(format!(
            "{}: the ServiceAccount may not read it: {}",
            describe(key),
            status.message
        )),
        _ => ReconcileError::Kube {
            context: describe(key),
            source: error,
        },
    }
}

/// The keys a refused render asked for, when that is why it was refused.
pub fn needed(error: &RenderError) -> Option<&[LookupKey]> {
    match error {
        RenderError::LookupsNeeded { keys } => Some(keys),
        _ => None,
    }
}

/// `answers` extended with `more`, refused past [`MAX_LOOKUPS`].
pub fn extend(
    answers: &mut Vec<LookupAnswer>,
    more: Vec<LookupAnswer>,
) -> Result<(), ReconcileError> {
    answers.extend(more);
    if answers.len() > MAX_LOOKUPS {
        return Err(ReconcileError::RenderRefused {
            category: LOOKUP_FAILED,
            message: format!("the chart makes more than {MAX_LOOKUPS} lookups"),
        });
    }
    Ok(())
}

/// The keys of `lookups`, for [`LastLookups`].
pub fn keys(lookups: &Lookups) -> Vec<LookupKey> {
    match lookups {
        Lookups::Offline => Vec::new(),
        Lookups::Answers(answers) => answers.iter().map(|a| a.key.clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> LookupKey {
        LookupKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "team".into(),
            name: String::new(),
        }
    }

    #[test]
    fn a_lookup_is_refused_past_its_call_and_render_limits() {
        let limits = LookupLimits {
            call_objects: 3,
            call_bytes: 100,
            render_objects: 5,
            render_bytes: 1_000,
        };
        let render = Mutex::new(Used::default());
        let key = key();
        let tally = |render| Tally {
            key: &key,
            limits,
            render,
            objects: 0,
            bytes: 0,
        };
        let mut one = tally(&render);
        for _ in 0..3 {
            one.add(10).unwrap();
        }
        let err = one.add(10).unwrap_err().to_string();
        assert!(
            err.contains("lookup v1 ConfigMap in namespace team")
                && err.contains("more than 3 objects")
                && err.contains("--lookup-max-objects"),
            "{err}"
        );
        let mut big = tally(&render);
        let err = big.add(101).unwrap_err().to_string();
        assert!(err.contains("--lookup-max-mib"), "{err}");
        // Refused objects do not count for the render: three so far.
        let mut next = tally(&render);
        next.add(1).unwrap();
        next.add(1).unwrap();
        let err = next.add(1).unwrap_err().to_string();
        assert!(err.contains("--lookup-render-max-objects"), "{err}");
    }

    #[test]
    fn sizes_are_those_of_the_json_the_render_receives() {
        let value = json!({"a": [1, 2], "b": "x"});
        assert_eq!(json_size(&value), value.to_string().len() as u64);
    }
}

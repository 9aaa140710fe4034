//! Applying one object: find its live state (from the live copies, a create-only apply, or a
//! read), decide ownership, compare with what the API server keeps of the bundle's content, and
//! write only what must change, leaving to other writers the fields `spec.driftIgnore` gives
//! them and the objects whose annotations say so ([`super::policy`]).

use std::borrow::Cow;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use pallet_formats::{Object, ObjectKey};
use serde_json::Value;

use super::plan::{self, Ownership, OWNER_LABEL};
use super::pointer::Pointer;
use super::policy::{ApplyMode, Candidate, ObjectPolicy, Policy};
use super::stored::Expected;
use super::undeclared::apply_leaving_out_undeclared;
use super::{
    live, Applied, Applier, ApplyError, Drifted, Outcome, Target, CHANGED_PATHS_LIMIT,
    FIELD_MANAGER,
};

/// The live state an apply found.
enum Found {
    /// There was none, and a create-only apply created it (leaving out these undeclared fields).
    Created(DynamicObject, Vec<String>),
    /// As read (None: no such object).
    Existing(Option<DynamicObject>),
}

/// The live object as a pass compared it with the bundle's content.
struct Comparison {
    /// The live object, whole.
    live: Value,
    /// Where they differ (bounded), or empty.
    fields: Vec<String>,
    /// Whether the API server's stored form of this content was known.
    known: bool,
}

impl Applier {
    pub(super) async fn apply_one(&self, object: &Object) -> Result<Applied, ApplyError> {
        let policy = ObjectPolicy::of(object.body()).map_err(|message| ApplyError::Policy {
            key: object.key(),
            message,
        })?;
        let Some(target) = self.resolve(object).await? else {
            if !super::is_optional(object) {
                return Err(ApplyError::KindNotServed {
                    key: object.key(),
                    api_version: object.api_version().to_string(),
                });
            }
            return Ok(skipped(object));
        };
        let ignored = self.rules.ignore.paths_for(&Candidate {
            key: &target.key,
            api_version: object.api_version(),
            body: object.body(),
        });
        if policy.apply == ApplyMode::Ignore {
            return self.not_applied(object, &target, &ignored).await;
        }
        let live = match self.find_live(object, &target).await? {
            Found::Created(written, left_out) => {
                return Ok(self.created(object, &target, &ignored, (written, left_out)));
            }
            Found::Existing(live) => live,
        };
        let left_alone = match (&live, policy) {
            (Some(_), p) if p.apply == ApplyMode::IfNotPresent => Some(Policy::ApplyIfNotPresent),
            (Some(_), p) if p.drift_ignored && self.rules.drift_pass => Some(Policy::DriftIgnore),
            _ => None,
        };
        if let (Some(policy), Some(live)) = (left_alone, &live) {
            return Ok(self.left_alone(object, &target, &ignored, live, policy));
        }
        let live_owner = live.as_ref().map(|l| {
            l.metadata
                .labels
                .as_ref()
                .and_then(|m| m.get(OWNER_LABEL))
                .map(String::as_str)
        });
        let claimed = self.claimed(live.as_ref());
        let ownership =
            plan::ownership(live_owner, &self.owner, self.collision_protection, claimed);
        let revision_before = match ownership {
            Ownership::Ours => live.as_ref().and_then(|l| plan::revision_of(&l.metadata)),
            _ => None,
        };
        let taking_over = ownership == Ownership::TakeOver;
        let adopted_from = match ownership {
            Ownership::Conflict { owner } => {
                return Err(ApplyError::OwnershipConflict {
                    key: target.key.clone(),
                    owner,
                    policy: self.collision_protection,
                })
            }
            Ownership::Adopt { previous_owner } => Some(previous_owner),
            Ownership::TakeOver => Some(self.takeover.as_ref().map(ToString::to_string)),
            Ownership::Create | Ownership::Ours => None,
        };
        // The previous tool's markers and field managers go before pallet's first write.
        let live = match live {
            Some(found) if taking_over => Some(
                self.release(&target.api, &target.key, found, &target.desired)
                    .await?,
            ),
            live => live,
        };
        let before = live
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        let mut applied = Applied {
            key: target.key.clone(),
            api_version: object.api_version().to_string(),
            outcome: Outcome::Created,
            adopted_from,
            resource_version_before: before.clone(),
            resource_version_after: before,
            revision_before,
            fields_changed: Vec::new(),
            left_out: Vec::new(),
            live: None,
        };
        let Some(live) = live else {
            let body = self.with_revision(target.desired.clone());
            let written = self.write(&target, &body).await?;
            return Ok(self.wrote(object, &target, &ignored, applied, written));
        };
        let mut compared = self.compare(object, &target, &ignored, &live);
        if !compared.fields.is_empty() && !compared.known && self.rules.drift_pass {
            // Re-applying the same content, and it differs where nothing is known of how the
            // server stores it (after a restart, say): a dry-run tells whether a write would
            // change anything, or the server only drops or reformats what it is sent.
            let body = self.body_over(&target, &ignored, &live).await?;
            let stored = self.dry_run(&target, &body).await?;
            self.rules.stored.learn(
                object.api_version(),
                &target.key,
                &without(&target.desired, &ignored),
                &stored,
            );
            compared = self.compare(object, &target, &ignored, &live);
        }
        applied.fields_changed = compared.fields;
        if applied.fields_changed.is_empty() {
            applied.outcome = Outcome::Unchanged;
            applied.adopted_from = None;
            applied.live = Some(compared.live);
            return Ok(applied);
        }
        applied.outcome = Outcome::Updated;
        let body = self.body_over(&target, &ignored, &live).await?;
        let written = self.write(&target, &body).await?;
        if recreated(&live, &written.0) {
            applied = as_created(applied);
        }
        Ok(self.wrote(object, &target, &ignored, applied, written))
    }

    /// The live state of `target`: from the live copies, else a create-only apply for an object
    /// pallet owns none of by that name, else a read.
    async fn find_live(&self, object: &Object, target: &Target) -> Result<Found, ApplyError> {
        let Target {
            key, api, resource, ..
        } = target;
        // A copy of an object this agent has just deleted is stale: created again, it is new.
        let cached = if self.deleted_unseen(resource, key) {
            live::Lookup::Absent
        } else {
            self.cached(resource, key)
        };
        Ok(match cached {
            live::Lookup::Found(object) => Found::Existing(Some(object.as_ref().clone())),
            live::Lookup::Absent => {
                // No pallet-owned object by this name: most likely none at all. Created
                // without a read, unless it exists after all (made by someone else).
                match self.create_only(api, key, &target.desired).await? {
                    Some((written, left_out)) => Found::Created(written, left_out),
                    None => Found::Existing(self.read_existing(api, resource, key, object).await?),
                }
            }
            live::Lookup::Unknown => {
                Found::Existing(self.read_existing(api, resource, key, object).await?)
            }
        })
    }

    /// The outcome of a create-only apply that created `written`.
    fn created(
        &self,
        object: &Object,
        target: &Target,
        ignored: &[Pointer],
        written: (DynamicObject, Vec<String>),
    ) -> Applied {
        let applied = Applied {
            key: target.key.clone(),
            api_version: object.api_version().to_string(),
            outcome: Outcome::Created,
            adopted_from: None,
            resource_version_before: None,
            resource_version_after: None,
            revision_before: None,
            fields_changed: Vec::new(),
            left_out: Vec::new(),
            live: None,
        };
        self.wrote(object, target, ignored, applied, written)
    }

    /// Records a write that left the object as `written`: the live copies, what the server keeps
    /// of the content, the journal.
    fn wrote(
        &self,
        object: &Object,
        target: &Target,
        ignored: &[Pointer],
        mut applied: Applied,
        (written, left_out): (DynamicObject, Vec<String>),
    ) -> Applied {
        if let Some(copies) = &self.live {
            copies.wrote(
                &target.resource,
                &written,
                applied.resource_version_before.as_deref(),
            );
        }
        let stored = serde_json::to_value(&written).unwrap_or(Value::Null);
        self.rules.stored.learn(
            object.api_version(),
            &target.key,
            &without(&target.desired, ignored),
            &stored,
        );
        applied.resource_version_after = written.metadata.resource_version.clone();
        applied.left_out = left_out;
        applied.live = Some(stored);
        self.record(&applied);
        applied
    }

    /// `pallet.dev/apply: Ignore`: nothing is written. In a revision's apply the change log
    /// says so when the object is missing or differs from the bundle; a re-apply looks at
    /// nothing.
    async fn not_applied(
        &self,
        object: &Object,
        target: &Target,
        ignored: &[Pointer],
    ) -> Result<Applied, ApplyError> {
        let mut applied = Applied {
            key: target.key.clone(),
            api_version: object.api_version().to_string(),
            outcome: Outcome::Withheld {
                policy: Policy::ApplyIgnore,
                exists: false,
            },
            adopted_from: None,
            resource_version_before: None,
            resource_version_after: None,
            revision_before: None,
            fields_changed: Vec::new(),
            left_out: Vec::new(),
            live: None,
        };
        if self.rules.drift_pass {
            return Ok(applied);
        }
        // Read when the copies have none: one may exist without pallet's label.
        let live = match self.cached(&target.resource, &target.key) {
            live::Lookup::Found(live) => Some(live.as_ref().clone()),
            live::Lookup::Absent | live::Lookup::Unknown => self
                .read_live(&target.api, &target.resource, &target.key)
                .await?
                .flatten(),
        };
        let differs = match &live {
            None => true,
            Some(live) => {
                let compared = self.compare(object, target, ignored, live);
                applied.fields_changed = compared.fields;
                !applied.fields_changed.is_empty()
            }
        };
        applied.outcome = Outcome::Withheld {
            policy: Policy::ApplyIgnore,
            exists: live.is_some(),
        };
        applied.resource_version_before = live.and_then(|l| l.metadata.resource_version);
        if differs {
            self.record(&applied);
        }
        Ok(applied)
    }

    /// An object a policy keeps as it is (`IfNotPresent`, or out of drift correction in a
    /// re-apply): nothing is written. In a revision's apply the change log says so when it
    /// differs from the bundle.
    fn left_alone(
        &self,
        object: &Object,
        target: &Target,
        ignored: &[Pointer],
        live: &DynamicObject,
        policy: Policy,
    ) -> Applied {
        let compared = self.compare(object, target, ignored, live);
        let version = live.metadata.resource_version.clone();
        let applied = Applied {
            key: target.key.clone(),
            api_version: object.api_version().to_string(),
            outcome: Outcome::Withheld {
                policy,
                exists: true,
            },
            adopted_from: None,
            resource_version_before: version.clone(),
            resource_version_after: version,
            revision_before: plan::revision_of(&live.metadata),
            fields_changed: compared.fields,
            left_out: Vec::new(),
            live: Some(compared.live),
        };
        if !applied.fields_changed.is_empty() && !self.rules.drift_pass {
            self.record(&applied);
        }
        applied
    }

    /// The bundle's content against `live`, ignored paths left out of both, the content as the
    /// API server is known to store it.
    fn compare(
        &self,
        object: &Object,
        target: &Target,
        ignored: &[Pointer],
        live: &DynamicObject,
    ) -> Comparison {
        // Decoded from JSON, so it encodes; were it not, everything would differ and be written.
        let live = serde_json::to_value(live).unwrap_or(Value::Null);
        let (fields, known) = {
            let applied = without(&target.desired, ignored);
            let live_compared = without(&live, ignored);
            let expected = self
                .rules
                .stored
                .expected(object.api_version(), &target.key, &applied);
            let content = match &expected {
                Expected::Stored(stored) => stored,
                Expected::AsApplied => applied.as_ref(),
            };
            (
                plan::differing_paths(content, &live_compared, CHANGED_PATHS_LIMIT),
                matches!(expected, Expected::Stored(_)),
            )
        };
        Comparison {
            live,
            fields,
            known,
        }
    }

    /// What to apply over the existing `live` object: the bundle's content without the ignored
    /// paths, so that their other field manager keeps them. A path pallet alone owns (set by
    /// pallet's create, not taken over yet) keeps its live value instead: left out of an apply,
    /// the server would remove it.
    async fn body_over(
        &self,
        target: &Target,
        ignored: &[Pointer],
        live: &DynamicObject,
    ) -> Result<Value, ApplyError> {
        let mut body = target.desired.clone();
        let left_out: Vec<&Pointer> = ignored.iter().filter(|p| p.remove(&mut body)).collect();
        if left_out.is_empty() {
            return Ok(self.with_revision(body));
        }
        // The live copies keep no managedFields: read them.
        let read;
        let live = match &live.metadata.managed_fields {
            Some(_) => live,
            None => {
                read = target
                    .api
                    .get(&target.key.name)
                    .await
                    .map_err(|e| ApplyError::from_kube(&target.key, e))?;
                &read
            }
        };
        let managed = live.metadata.managed_fields.clone().unwrap_or_default();
        let live_value = serde_json::to_value(live).unwrap_or(Value::Null);
        for pointer in left_out {
            let others = pointer.owned_by(&live_value, &managed, |e| !is_pallets(e));
            let ours = pointer.owned_by(&live_value, &managed, is_pallets);
            if let (false, true, Some(value)) = (others, ours, pointer.get(&live_value)) {
                pointer.set(&mut body, value.clone());
            }
        }
        Ok(self.with_revision(body))
    }

    fn with_revision(&self, body: Value) -> Value {
        match self.revision {
            Some(revision) => plan::with_revision_annotation(body, revision),
            None => body,
        }
    }

    /// Server-side apply of `body`, forced, as pallet's field manager; fields the schema does
    /// not declare are left out (and returned).
    async fn write(
        &self,
        target: &Target,
        body: &Value,
    ) -> Result<(DynamicObject, Vec<String>), ApplyError> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        apply_leaving_out_undeclared(&target.api, &target.key, &params, body)
            .await
            .map_err(|e| ApplyError::from_kube(&target.key, e))
    }

    /// What the API server would store for `body`, written nowhere.
    async fn dry_run(&self, target: &Target, body: &Value) -> Result<Value, ApplyError> {
        let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
        let (stored, _) = apply_leaving_out_undeclared(&target.api, &target.key, &params, body)
            .await
            .map_err(|e| ApplyError::from_kube(&target.key, e))?;
        Ok(serde_json::to_value(&stored).unwrap_or(Value::Null))
    }

    /// Read-only: the objects whose live state differs from the rendered one (or that are
    /// missing), each with the first differing field path, by the same rules as an apply
    /// (ignored paths, what the API server keeps; objects a policy keeps as they are left out).
    /// Writes nothing; used while paused to show what resuming would revert.
    pub async fn drift(&self, objects: &[Object]) -> Result<Vec<Drifted>, ApplyError> {
        let mut drifted = Vec::new();
        for object in objects {
            let policy = ObjectPolicy::of(object.body()).unwrap_or_default();
            if policy.apply == ApplyMode::Ignore {
                continue;
            }
            let Some(target) = self.resolve(object).await? else {
                continue;
            };
            let ignored = self.rules.ignore.paths_for(&Candidate {
                key: &target.key,
                api_version: object.api_version(),
                body: object.body(),
            });
            let Some(live) = self
                .read_live(&target.api, &target.resource, &target.key)
                .await?
            else {
                continue; // the kind is gone: nothing to compare
            };
            let message = match live {
                None => Some("missing from the cluster".to_string()),
                Some(_) if policy.apply == ApplyMode::IfNotPresent || policy.drift_ignored => None,
                Some(live) => self
                    .compare(object, &target, &ignored, &live)
                    .fields
                    .first()
                    .map(|path| format!("differs from the bundle at {path}")),
            };
            if let Some(message) = message {
                drifted.push(Drifted {
                    key: target.key,
                    api_version: object.api_version().to_string(),
                    message,
                });
            }
        }
        Ok(drifted)
    }

    /// Removes pallet's ownership label from `live`, an object a prune or a deletion keeps by
    /// `policy`, and records it.
    pub(super) async fn orphan_kept(
        &self,
        api: &Api<DynamicObject>,
        resource: &ApiResource,
        (key, api_version): (&ObjectKey, &str),
        live: &DynamicObject,
        policy: Policy,
    ) -> Result<(), ApplyError> {
        let patch = serde_json::json!({"metadata": {"labels": {OWNER_LABEL: null}}});
        let written = match api
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => written,
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(e) => return Err(ApplyError::from_kube(key, e)),
        };
        if let Some(copies) = &self.live {
            // It leaves the label's watch: that event is this write's echo.
            copies.deleted(resource, key.namespace.as_deref(), &key.name);
        }
        self.rules.stored.forget(api_version, key);
        self.record(&Applied {
            key: key.clone(),
            api_version: api_version.to_string(),
            outcome: Outcome::Orphaned { policy },
            adopted_from: None,
            resource_version_before: live.metadata.resource_version.clone(),
            resource_version_after: written.metadata.resource_version,
            revision_before: plan::revision_of(&live.metadata),
            fields_changed: vec![format!(".metadata.labels.{OWNER_LABEL}")],
            left_out: Vec::new(),
            live: None,
        });
        Ok(())
    }
}

/// Whether the write `written`, decided on `live`, made a new object: the one the pass saw was
/// deleted meanwhile (server-side apply creates what is missing), so its uid changed.
fn recreated(live: &DynamicObject, written: &DynamicObject) -> bool {
    matches!(
        (&live.metadata.uid, &written.metadata.uid),
        (Some(before), Some(after)) if before != after
    )
}

/// `applied`, an update that turned out to create the object: said as a create, with nothing
/// before it.
fn as_created(applied: Applied) -> Applied {
    Applied {
        outcome: Outcome::Created,
        adopted_from: None,
        resource_version_before: None,
        revision_before: None,
        fields_changed: Vec::new(),
        ..applied
    }
}

/// The outcome for an optional object whose kind the cluster does not serve.
fn skipped(object: &Object) -> Applied {
    Applied {
        key: object.key(),
        api_version: object.api_version().to_string(),
        outcome: Outcome::Skipped,
        adopted_from: None,
        resource_version_before: None,
        resource_version_after: None,
        revision_before: None,
        fields_changed: Vec::new(),
        left_out: Vec::new(),
        live: None,
    }
}

/// `value` without the `ignored` paths (borrowed when there are none: the common case).
fn without<'a>(value: &'a Value, ignored: &[Pointer]) -> Cow<'a, Value> {
    if ignored.is_empty() {
        return Cow::Borrowed(value);
    }
    let mut value = value.clone();
    for pointer in ignored {
        pointer.remove(&mut value);
    }
    Cow::Owned(value)
}

/// Whether a managedFields entry is pallet's own apply.
fn is_pallets(entry: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry) -> bool {
    entry.manager.as_deref() == Some(FIELD_MANAGER)
        && entry.operation.as_deref() == Some("Apply")
        && entry.subresource.is_none()
}

//! Every condition reason the agent writes on a BundleDeployment, with what it means and what to
//! do: the one list `docs/reference/reasons.md` is generated from (`pallet docs generate`).
//!
//! A test scans the source for the reasons the code can write (error categories, `reason:`
//! literals, the status writer's conditions) and fails on one missing here, so a new reason is
//! documented where it is introduced. The same names are the revisions' `reason` field and the
//! Events' reasons of failures.

use super::conditions::types::{
    HEALTHY, INSTALLED, PAUSED, READY, RECONCILING, ROLLED_BACK, STALLED, UNPACKED,
};

/// Where in a reconcile a reason comes from; the reference page groups reasons by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Normal progress: what the conditions say while nothing is wrong.
    Progress,
    /// The spec is refused before anything is fetched.
    Spec,
    /// Fetching and unpacking the sources (condition Unpacked).
    Source,
    /// Secrets, ConfigMaps and keys the BundleDeployment reads.
    Inputs,
    /// Rendering the tree to objects and running the processors (condition Installed).
    Render,
    /// Storing the revision's snapshot.
    Revision,
    /// Writing the objects to the cluster.
    Apply,
    /// Health, rollout and rollback.
    Health,
    /// Deleting the BundleDeployment.
    Deletion,
}

impl Stage {
    /// Every stage, in the order of a reconcile.
    pub const ALL: [Stage; 9] = [
        Stage::Progress,
        Stage::Spec,
        Stage::Source,
        Stage::Inputs,
        Stage::Render,
        Stage::Revision,
        Stage::Apply,
        Stage::Health,
        Stage::Deletion,
    ];

    /// The stage's title on the reference page.
    pub fn title(self) -> &'static str {
        match self {
            Stage::Progress => "Normal progress",
            Stage::Spec => "The spec",
            Stage::Source => "Sources",
            Stage::Inputs => "Secrets, values and keys",
            Stage::Render => "Rendering and processors",
            Stage::Revision => "Revisions and snapshots",
            Stage::Apply => "Applying objects",
            Stage::Health => "Health, rollout and rollback",
            Stage::Deletion => "Deletion",
        }
    }
}

/// One condition reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReasonDoc {
    /// The reason, as written in `status.conditions[].reason`.
    pub name: &'static str,
    /// Where it comes from.
    pub stage: Stage,
    /// The condition types it is written on.
    pub conditions: &'static [&'static str],
    /// What it means.
    pub meaning: &'static str,
    /// What to do.
    pub action: &'static str,
}

const fn reason(
    name: &'static str,
    stage: Stage,
    conditions: &'static [&'static str],
    meaning: &'static str,
    action: &'static str,
) -> ReasonDoc {
    ReasonDoc {
        name,
        stage,
        conditions,
        meaning,
        action,
    }
}

/// A failure while fetching: on Unpacked and Ready, and Stalled when it will not pass by itself.
const FETCH: &[&str] = &[UNPACKED, READY, STALLED];
/// A failure while rendering or applying: on Installed and Ready, and Stalled when permanent.
const INSTALL: &[&str] = &[INSTALLED, READY, STALLED];
/// A spec refused before anything is fetched: on Ready and Stalled.
const SPEC: &[&str] = &[READY, STALLED];

/// Every reason, in the order of a reconcile.
pub const REASONS: &[ReasonDoc] = &[
    // Normal progress.
    reason("Unpacked", Stage::Progress, &[UNPACKED],
        "every source was fetched and resolved to an immutable ref",
        "nothing"),
    reason("Installed", Stage::Progress, &[INSTALLED],
        "the active revision's objects are applied; the message names the revision, how many objects and the content digest",
        "nothing"),
    reason("Healthy", Stage::Progress, &[HEALTHY, READY],
        "every object of the active revision is healthy",
        "nothing"),
    reason("Applying", Stage::Progress, &[READY, RECONCILING],
        "the objects of a revision are being written",
        "wait; `pallet status` shows the revision"),
    reason("Progressing", Stage::Progress, &[READY, RECONCILING, HEALTHY, STALLED],
        "the active revision is not healthy yet; Healthy names the first objects and why (or the `post-*` helm hook it waits for)",
        "wait, or look at those objects"),
    reason("Idle", Stage::Progress, &[RECONCILING, STALLED],
        "nothing is in progress and nothing is stuck",
        "nothing"),
    reason("Retrying", Stage::Progress, &[RECONCILING, STALLED],
        "a transient error (network, server, API server) is retried with a per-BundleDeployment backoff (1 s doubling to 5 min; at most 4 s while the API server cannot be reached); Ready carries the error's own reason",
        "nothing, unless it lasts: see Ready's reason"),
    reason("Active", Stage::Progress, &[PAUSED],
        "`spec.paused` is false: the agent reconciles normally",
        "nothing"),
    reason("Paused", Stage::Progress, &[PAUSED, RECONCILING],
        "`spec.paused` is true (the message carries the annotation `pallet.dev/paused-reason`): the agent observes and reports, and writes nothing",
        "`pallet resume` (`--dry-run` shows what resuming would revert)"),
    reason("NewRevision", Stage::Progress, &[ROLLED_BACK],
        "a new revision replaced a rolled-back one",
        "nothing"),
    reason("UpToDate", Stage::Progress, &[ROLLED_BACK],
        "after a rollback, the active revision is again what the spec and the sources render",
        "nothing"),
    // The spec.
    reason("DependencyNotReady", Stage::Spec, &[READY, RECONCILING],
        "a `spec.dependsOn` entry is not ready yet (a BundleDeployment not Ready at its current generation, or an object whose `readyExpr` is false or which does not exist); the message names it. Nothing is fetched or applied until it is; its becoming ready starts this one at once",
        "wait, or look at the dependency named (`pallet status` on it)"),
    reason("DependencyCycle", Stage::Spec, SPEC,
        "the BundleDeployments of `spec.dependsOn` depend on each other in a cycle; the message names the cycle",
        "remove one edge of the cycle"),
    reason("InvalidDependency", Stage::Spec, SPEC,
        "a `spec.dependsOn` `readyExpr` does not compile, or names a kind the API server does not serve; the message names the entry and the error",
        "fix the entry"),
    reason("InvalidHealthCheck", Stage::Spec, SPEC,
        "a `spec.healthChecks` CEL expression does not compile (or a selector is invalid); the message names the check, the field and the parse error. Nothing was fetched or written",
        "fix the expression; the active revision keeps running"),
    reason("CelBudgetExceeded", Stage::Spec, SPEC,
        "a CEL expression (`spec.healthChecks` or a `dependsOn` `readyExpr`) is over its budget: cost (1,000,000 units, the Kubernetes API server's per-expression limit), memory of the values it builds (32 MiB), one string (4 MiB), one list (100,000 elements), time (1 s) or nesting (48 levels); the message names the expression, the bound and the figures. Over it for any input, it is refused before anything is read or fetched; over it on an object, that object (or dependency) is not evaluated again until the spec changes, and a revision waiting for it fails",
        "make the expression cheaper (filter before mapping, avoid nested loops over large lists); see the security guide's CEL budget"),
    reason("InvalidProcessor", Stage::Spec, SPEC,
        "a `function` processor asks for what this agent refuses: a `timeout` over `--function-timeout-max`, or a `url` whose host is not one `--allow-function-host` lists; nothing was fetched or written",
        "shorten the timeout, or ask the agent's operator to allow the function's host"),
    reason("InvalidDuration", Stage::Spec, SPEC,
        "a duration of the spec (`rollout.progressDeadline`, a source's `pollInterval`, a function's `timeout`) is longer than the longest duration accepted (2562047h, Go's limit) or not a duration; the message names the field. Nothing was fetched or written",
        "write a shorter duration; the active revision keeps running"),
    reason("ServiceAccountRequired", Stage::Spec, SPEC,
        "the agent runs with `--require-service-account` and the BundleDeployment names no `spec.serviceAccount`; nothing was fetched or written",
        "name a ServiceAccount allowed to create the bundle's objects"),
    // The target cluster (`spec.kubeConfig`): nothing is fetched or written while it cannot be
    // used, and its objects stay as they are.
    reason("KubeConfigNotFound", Stage::Spec, SPEC,
        "the Secret `spec.kubeConfig.secretRef` names does not exist, or could not be read from the agent's cluster; the message names the cluster and the Secret. Nothing was fetched or written; the bundle's objects on that cluster stay as they are",
        "create the Secret (an edit of it is seen at once), or correct the reference"),
    reason("KubeConfigInvalid", Stage::Spec, SPEC,
        "the kubeConfig Secret holds no usable kubeconfig: the key is missing, the context does not exist, it names files or an `exec` credential plugin (refused: the agent reads no file and runs no program for a kubeconfig), or its API server's address is refused by the egress rules; or the agent deploys to its own cluster only",
        "put a self-contained kubeconfig (inline certificates or a token) under the key named, or allow the address (`--allow-loopback-egress`, `--allow-link-local-egress`)"),
    reason("KubeConfigNotAllowed", Stage::Spec, SPEC,
        "the BundleDeployment may not use the kubeConfig Secret under the Secret rules: in the agent's namespace it is not labelled `access.pallet.dev/<name>: \"true\"`, and the bundle's ServiceAccount may not get it (a SubjectAccessReview); a bundle only targets a cluster whose credentials it could read",
        "label the Secret for the BundleDeployment, or name a `spec.serviceAccount` allowed to get it"),
    reason("ClusterUnreachable", Stage::Spec, SPEC,
        "the target cluster does not answer (refused connections, requests past `--cluster-request-timeout`); the message names the cluster, since when, the last error and when it is checked next. Nothing is sent to it meanwhile and only its own bundles wait; a deletion keeps its finalizer until the objects there can be deleted",
        "nothing when it is a passing outage: the bundles are reconciled as soon as a check finds the cluster back; else check the cluster and its address in the kubeconfig"),
    reason("ClusterUnauthorized", Stage::Spec, SPEC,
        "the target cluster refuses the kubeconfig's credentials (401); the message names the cluster",
        "rotate the credentials in the Secret: the new ones are used at once, without a restart"),
    reason("OutOfScope", Stage::Spec, &[],
        "the BundleDeployment was relabelled to another shard during a pass; the pass stops without writing (not written on the object: the other shard's agent takes over)",
        "nothing"),
    // Sources.
    reason("VerificationFailed", Stage::Source, FETCH,
        "a source with `verify` is not signed by the keys or identities it names (or its signature, provenance file or log entry does not match); the message names the source, the method and why. Nothing of it is used; the active revision keeps running",
        "check who published it, or the keys and identities in `verify`"),
    reason("VerificationRequired", Stage::Source, FETCH,
        "the agent runs with `--require-verification` and a source has no `verify`",
        "add `verify` to the source (see the verification guide)"),
    reason("Fetching", Stage::Source, &[UNPACKED],
        "a fetch is taking longer than 3 s; the message names each source and for how long (it ends as the fetch does, or as `Unreachable` at `--fetch-timeout`)",
        "nothing, unless the server is known to hang"),
    reason("NotFound", Stage::Source, FETCH,
        "the image tag or digest, git ref or URL does not exist; a chart repository lists no such chart or version",
        "check the ref; for a branch, that it was pushed"),
    reason("InvalidSource", Stage::Source, FETCH,
        "the source spec cannot be acted on (a version that is no version or range, a bad URL), or a chart repository's `index.yaml` does not parse",
        "fix the spec or the URL"),
    reason("Unauthorized", Stage::Source, FETCH,
        "the source refused the credentials",
        "fix the Secret (`dockerconfigjson`, `username`/`password`, `token`, `ssh-privatekey` with `known_hosts`)"),
    reason("InvalidCredentials", Stage::Source, FETCH,
        "the credentials Secret has the wrong keys or type for the source's kind",
        "fix the Secret's keys (`dockerconfigjson`, `username`/`password`, `token`, `ssh-privatekey` with `known_hosts`)"),
    reason("Unreachable", Stage::Source, FETCH,
        "network error or timeout (transient: retried with backoff); with an active revision, that revision stays enforced from its snapshot meanwhile",
        "check the server; nothing to do when it comes back"),
    reason("ServerError", Stage::Source, FETCH,
        "the server answered with a 5xx (transient: retried with backoff); with an active revision, that revision stays enforced from its snapshot meanwhile",
        "check the server; nothing to do when it comes back"),
    reason("EgressRefused", Stage::Source, FETCH,
        "a source, chart repository, registry or git server is at a loopback or link-local address (checked on the addresses its name resolves to, and on every redirect), a git repository is a local path or `file://` URL, or a redirect left the URL's scheme, host and port; the message names the address and the flag or field that allows it",
        "point the source elsewhere; for a server that really is there, start the agent with `--allow-loopback-egress`, `--allow-link-local-egress` or `--allow-local-git`, or set the source's `allowCrossHostRedirects`"),
    reason("NoMatchingVersion", Stage::Source, FETCH,
        "no tag or chart version satisfies the `semver` range; the message shows the range and the newest versions there are",
        "publish a matching version or widen the range"),
    reason("DigestMismatch", Stage::Source, FETCH,
        "the content does not match the pinned `sha256` or digest, or a chart archive does not match its index's digest",
        "re-pin, or find out who changed the content"),
    reason("NotABundle", Stage::Source, FETCH,
        "the artifact is not a bundle (an image without a bundle layer, an archive of the wrong type)",
        "fix the artifact or the ref"),
    reason("BadArchive", Stage::Source, FETCH,
        "the archive is corrupt or truncated",
        "fix the artifact"),
    reason("UnsafeContent", Stage::Source, FETCH,
        "the content tries to escape the tree: an absolute path, a `..` segment, a symlink out of it (also once a chart's top directory is stripped), a device file",
        "fix the artifact"),
    reason("LimitExceeded", Stage::Source, FETCH,
        "the source is too large: more bytes inflated than `--unpack-max-mib` (hardlinks count their target's size), a file over `--unpack-max-file-mib`, more entries than `--unpack-max-entries`, or a GNU long-name or PAX header record over 64 KiB; the message names the source, the entry, the value and the limit with its flag",
        "fix the artifact, or raise the flag if the content is legitimate"),
    reason("SourceConflict", Stage::Source, FETCH,
        "two sources write the same path of the assembled tree",
        "give the sources distinct `destination`s, or remove the overlap"),
    reason("Cancelled", Stage::Source, FETCH,
        "unpacking stopped because its fetch finished, was dropped or passed its deadline (transient: retried)",
        "nothing, unless it repeats: then raise `--fetch-timeout`"),
    reason("LocalIO", Stage::Source, FETCH,
        "a local filesystem error in the agent's cache or scratch space, or the scratch space (`--unpack-scratch-mib`) is full (transient: retried)",
        "check the agent's cache volume; raise `--unpack-scratch-mib` or the volume if it is full"),
    // Secrets, values and keys.
    reason("SecretNotFound", Stage::Inputs, FETCH,
        "a Secret the spec names does not exist",
        "create it (see the secret references of the API reference)"),
    reason("SecretKeyMissing", Stage::Inputs, FETCH,
        "a Secret the spec names lacks a key the source needs",
        "add the key"),
    reason("SecretNotAllowed", Stage::Inputs, FETCH,
        "the Secret was not given to the BundleDeployment: in the agent's namespace without its label `access.pallet.dev/<name>: \"true\"`, in a namespace it may not read, or one of the agent's own Secrets (snapshots, render keys: never usable)",
        "label it for the BundleDeployment, allow-list the namespace (`--allow-secret-namespace`), or name a `serviceAccount` allowed to `get` it"),
    reason("ValuesNotFound", Stage::Inputs, FETCH,
        "a `config.helm.valuesFrom` object or key is missing (and not `optional`); the message names kind, namespace, name and key",
        "create the object (the agent sees it within seconds), or mark the reference `optional: true`; the last healthy revision keeps running"),
    reason("ValuesInvalid", Stage::Inputs, FETCH,
        "a `config.helm.valuesFrom` document is not a YAML mapping; the message names kind, namespace, name and key",
        "fix the object; the last healthy revision keeps running"),
    reason("ValuesNotAllowed", Stage::Inputs, FETCH,
        "a `config.helm.valuesFrom` object is in a namespace the BundleDeployment may not read",
        "move the object, or fix the namespace rule as for Secrets"),
    reason("RenderKeyInvalid", Stage::Inputs, FETCH,
        "the Secret holding the BundleDeployment's render key (`pallet-render-key-<uid>` in the agent's namespace) is not one the agent made for it (wrong type, another UID, no 32-byte `key`)",
        "delete it: a new key is made, and every value the chart generates changes"),
    reason("RenderKeyUnavailable", Stage::Inputs, FETCH,
        "no render key could be made: the operating system's random source failed, or the BundleDeployment has no UID yet",
        "retry; check the agent's node if it persists"),
    reason("WebhookCertificateFailed", Stage::Inputs, INSTALL,
        "the BuiltIn provider could not issue or read the CA or serving certificates of a registry-v1 bundle's webhooks",
        "check the CA Secret `<name>-pallet-webhook-ca` in the agent's namespace; delete it to issue a new CA"),
    reason("CertManagerMissing", Stage::Inputs, INSTALL,
        "`config.registryV1.certificateProvider` is CertManager but the cluster does not serve cert-manager's Issuer or Certificate; nothing was applied",
        "install cert-manager, or use `certificateProvider: BuiltIn`"),
    // Rendering and processors.
    reason("ReadFailed", Stage::Render, INSTALL,
        "a file of the bundle tree could not be read",
        "check the agent's cache volume; fix the bundle if the file is unreadable"),
    reason("InvalidYAML", Stage::Render, INSTALL,
        "a manifest or template output does not parse; the message names the file, document and line (helm: chart, template, line)",
        "fix the bundle; the last healthy revision keeps running"),
    reason("InvalidObject", Stage::Render, INSTALL,
        "a document is not a Kubernetes object (no `apiVersion`, `kind` or name)",
        "fix the bundle; the last healthy revision keeps running"),
    reason("DuplicateObject", Stage::Render, INSTALL,
        "two documents render the same object",
        "fix the bundle; the last healthy revision keeps running"),
    reason("InvalidConfig", Stage::Render, INSTALL,
        "the format's settings (`spec.config`) or the chart's values cannot be used with this bundle",
        "fix `spec.config` or the values"),
    reason("UnsupportedBundle", Stage::Render, INSTALL,
        "a registry+v1 bundle breaks a rule of OLM's format or asks for what pallet does not install (the message names the rule)",
        "fix the bundle, or install it with OLM"),
    reason("NotImplemented", Stage::Render, INSTALL,
        "the bundle uses a feature of its format that pallet does not implement; the message names it",
        "change the bundle to do without it"),
    reason("EmptyBundle", Stage::Render, INSTALL,
        "the sources rendered no objects and `rollout.allowEmpty` is not set; nothing was applied or pruned",
        "fix the source (its `directory`, tag or path), or set `rollout.allowEmpty: true` to remove everything on purpose"),
    reason("ObjectTooLarge", Stage::Render, INSTALL,
        "an object is over the 1.5 MiB the API server stores; found before anything is stored or applied, and not rendered again until the sources or the spec change",
        "split the object or move its data out of the bundle"),
    reason("RenderBudgetExceeded", Stage::Render, INSTALL,
        "the render went over one of its budgets (template nesting, steps, output size; in the agent's render sandbox, memory, CPU or time); the message names the budget and its flag",
        "fix the chart or kustomization, or raise the agent's render flags if the content is legitimate"),
    reason("RenderFailed", Stage::Render, INSTALL,
        "the render sandbox's child ended without an answer (a signal, an unexpected exit status); the message carries its last words",
        "look at the agent's logs; report it if the bundle renders elsewhere"),
    reason("KustomizeInvalid", Stage::Render, INSTALL,
        "the kustomization (or a file it names) is malformed or breaks one of kustomize's rules; the message names the kustomization file and field",
        "fix the kustomization; the last healthy revision keeps running"),
    reason("KustomizeMissingFile", Stage::Render, INSTALL,
        "a file or directory the kustomization names does not exist in the tree",
        "add the file, or fix the path (a source's `destination` moves it)"),
    reason("KustomizeLoadRestricted", Stage::Render, INSTALL,
        "a path leaves the kustomization root or the bundle tree (kustomize's load restriction)",
        "keep the files inside the tree; bring outside files in as another source"),
    reason("KustomizeConflict", Stage::Render, INSTALL,
        "two resources end up with the same identity, or a merge or replace finds no target",
        "fix the kustomization"),
    reason("KustomizeNoMatch", Stage::Render, INSTALL,
        "a patch, replacement or var selects nothing, or something ambiguous",
        "fix the selector"),
    reason("KustomizeCycle", Stage::Render, INSTALL,
        "kustomizations include each other in a cycle",
        "break the cycle"),
    reason("KustomizeUnsupported", Stage::Render, INSTALL,
        "the kustomization uses a field kustomize has and pallet refuses (exec or container plugins)",
        "do without it, or render with a `function` processor the agent allows"),
    reason("RemoteResourceRefused", Stage::Render, INSTALL,
        "a kustomization names a remote base, component or chart; nothing is fetched while rendering",
        "add that repository or chart as another source and name it by path"),
    reason("SubstitutionFailed", Stage::Render, INSTALL,
        "a `substitute` processor met an undefined variable in strict mode or a malformed reference; the message names the processor",
        "fix the variables or the content; the last healthy revision keeps running"),
    reason("FunctionFailed", Stage::Render, INSTALL,
        "a `function` processor reported an error result, answered 4xx, exited non-zero, or names a host or executable the agent does not allow; the message names the processor and what it said: its ResourceList's results, else a 4xx answer's status code and size, an executable's exit status (never the body of an answer or an executable's standard error, which may quote what it was sent; the standard error goes to the agent's log)",
        "fix the function's input or configuration; the last healthy revision keeps running"),
    reason("FunctionUnavailable", Stage::Render, &[UNPACKED, INSTALLED, READY],
        "a function could not be reached or did not answer in time (its `timeout`, at most `--function-timeout-max`, or what was left of `--function-deadline` for the render's calls together); transient: retried with backoff",
        "check the function's server"),
    reason("CallingFunction", Stage::Render, &[UNPACKED, INSTALLED, READY],
        "a `function` processor has not answered within 3 s; the message names it and for how long. The call goes on apart from the reconcile workers (other BundleDeployments carry on) and its answer starts the next pass",
        "nothing, unless the function is known to hang"),
    // Revisions and snapshots.
    reason("RevisionTooLarge", Stage::Revision, INSTALL,
        "the revision's snapshot is over `--max-revision-mib`; found before anything is stored or applied, and not rendered again until the sources or the spec change",
        "make the bundle smaller, or raise `--max-revision-mib` if it really is that large"),
    reason("SnapshotQuotaExceeded", Stage::Revision, INSTALL,
        "storing the new revision's snapshot would take this BundleDeployment's stored snapshots past `--snapshot-quota-per-bundle-mib`, or the agent namespace's past `--snapshot-quota-mib`; the message names the quota, what is stored and the revision's size. Nothing was stored or applied; the active revision stays",
        "lower `spec.rollout.historyLimit` (older snapshots are deleted as revisions are superseded), make the bundle smaller, or raise the quota"),
    reason("RevisionFailed", Stage::Revision, INSTALL,
        "the rendered content is the same as a revision that already failed, and there is no active revision to keep",
        "change the spec or the sources, or `pallet retry`"),
    reason("RevisionCorrupt", Stage::Revision, INSTALL,
        "a revision snapshot Secret is damaged (the message names the Secret)",
        "a damaged snapshot is rewritten with the next save; delete it if it stays"),
    reason("RevisionNotFound", Stage::Revision, INSTALL,
        "a revision snapshot Secret is missing (the message names the Secret); a rollback to it is impossible",
        "check who deleted Secrets in the agent's namespace; roll back to another revision"),
    reason("RevisionFormatUnsupported", Stage::Revision, INSTALL,
        "a snapshot was written in a storage format this agent does not read (by a newer agent)",
        "run the agent version that wrote it, or let a new revision replace it"),
    reason("RevisionInvalid", Stage::Revision, INSTALL,
        "a revision cannot be stored as it is (serialization failed, an invalid name or number)",
        "report it with the message"),
    reason("RevisionConflict", Stage::Revision, INSTALL,
        "a Secret with the revision's name exists and cannot be replaced",
        "delete or rename that Secret"),
    reason("RevisionStoreFailed", Stage::Revision, INSTALL,
        "the API server refused or failed a snapshot write (the message names the Secret)",
        "check RBAC on Secrets in the agent's namespace"),
    // Applying objects.
    reason("TakeoverFailed", Stage::Apply, INSTALL,
        "`spec.takeover` could not finish: the previous tool's release records could not be marked uninstalled or deleted, or the owner it names could not be read; the message says which. The objects are applied",
        "fix the access named (the agent needs to read and write the release's Secrets), then `pallet retry`"),
    reason("TakenOver", Stage::Apply, &[],
        "an Event: `spec.takeover` is done; the previous tool's records were handled as `releaseRecords` says (see `status.takeover`)",
        "nothing; uninstall the previous tool's controller for this release when you are ready"),
    reason("ObjectRejected", Stage::Apply, INSTALL,
        "the API server refused an object (validation, an admission webhook)",
        "fix the object"),
    reason("Forbidden", Stage::Apply, INSTALL,
        "RBAC denied a write (the message names the identity: the agent or the impersonated ServiceAccount)",
        "grant the permission; a held revision heals at the next requeue (Reconciling says it is retried then)"),
    reason("KindNotServed", Stage::Apply, INSTALL,
        "the cluster does not serve an object's kind (its CRD is not installed)",
        "install the CRD first, or mark the object `pallet.dev/optional: \"true\"`; retried at every requeue"),
    reason("InvalidScope", Stage::Apply, INSTALL,
        "an object names a namespace and its kind is cluster-scoped, or the reverse",
        "fix the object"),
    reason("OwnershipConflict", Stage::Apply, INSTALL,
        "the object exists and belongs to someone else under `collisionProtection`",
        "remove the other owner, or relax `collisionProtection`"),
    reason("InvalidPolicy", Stage::Apply, INSTALL,
        "an object of the bundle carries a policy annotation (`pallet.dev/apply`, `pallet.dev/prune`, `pallet.dev/drift`) with a value pallet does not know; the message names the object, the annotation and the values it takes. Nothing of the revision is written",
        "fix the annotation in the bundle"),
    reason("DriftIgnoreUnmatched", Stage::Apply, &[],
        "a Warning Event: a `spec.driftIgnore` rule matches no object of the revision, or one of its paths cannot be used; `status.driftIgnore` names the rule and why",
        "fix or remove the rule"),
    reason("CrdNotEstablished", Stage::Apply, INSTALL,
        "a CRD of the bundle did not become Established in time (transient: retried)",
        "check the CRD's conditions (`NamesAccepted`)"),
    reason("ApplyFailed", Stage::Apply, INSTALL,
        "a write failed in a way that may pass (network, conflict, throttling, 5xx): retried with backoff",
        "nothing, unless it lasts: check the API server"),
    reason("KubernetesAPIError", Stage::Apply, INSTALL,
        "a read or write of the agent's own (discovery, Secrets, its status) failed (transient: retried)",
        "check the API server and the agent's RBAC"),
    // Health, rollout and rollback.
    reason("Unhealthy", Stage::Health, &[HEALTHY, READY],
        "an object of the active revision failed for good (not merely in progress); the message names it and why",
        "fix the application; push a fix, or `pallet rollback`"),
    reason("HealthCheckFailed", Stage::Health, &[HEALTHY, READY, STALLED, ROLLED_BACK],
        "a `spec.healthChecks` check said failed: a CEL `failed` expression was true, or an HTTP probe failed `failureThreshold` times in a row; the message names the object, the check and what it found",
        "fix the application or the check; push a fix, or `pallet retry`"),
    reason("RunningHooks", Stage::Health, &[READY, RECONCILING],
        "a helm `pre-install` or `pre-upgrade` hook of the new revision is running (the message names it)",
        "wait; `kubectl get job` and `kubectl logs` on the hook"),
    reason("HookFailed", Stage::Health, &[READY, STALLED, ROLLED_BACK],
        "a helm hook failed (Job Failed, Pod Failed, object refused); the message names the event, kind, namespace/name and why",
        "look at the hook's Job or Pod; fix the chart or values, or `pallet retry`"),
    reason("ProgressDeadlineExceeded", Stage::Health, &[READY, STALLED, ROLLED_BACK],
        "the revision was not healthy within `rollout.progressDeadline`",
        "see the revision's message in `pallet history`; fix and push, or `pallet retry`"),
    reason("RolledBack", Stage::Health, &[READY, STALLED, RECONCILING, ROLLED_BACK],
        "a failed revision was replaced by the last healthy one",
        "as for the failure; Ready returns when a new revision is healthy or the sources render the active one again"),
    reason("RollbackRequested", Stage::Health, &[ROLLED_BACK],
        "someone asked for this revision (`pallet rollback`)",
        "nothing; a new revision or a retry moves on"),
    // Deletion.
    reason("Deleting", Stage::Deletion, &[READY],
        "the BundleDeployment is being deleted and some objects are still terminating",
        "wait; the finalizer stays until they are gone"),
    reason("DeletionForbidden", Stage::Deletion, &[READY],
        "objects of the bundle exist and its identity may not delete them; the message names each and why. Objects that were never created need no deletion and do not block it",
        "grant `delete`, or remove the finalizer `pallet.dev/cleanup` to leave the objects where they are"),
];

/// The documentation of `name`, when it is a known reason.
pub fn find(name: &str) -> Option<&'static ReasonDoc> {
    REASONS.iter().find(|r| r.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_listed_once_and_written_on_known_conditions() {
        let known = [
            READY,
            RECONCILING,
            STALLED,
            UNPACKED,
            INSTALLED,
            HEALTHY,
            PAUSED,
            ROLLED_BACK,
        ];
        for (i, r) in REASONS.iter().enumerate() {
            assert!(
                REASONS[..i].iter().all(|other| other.name != r.name),
                "{} is listed twice",
                r.name
            );
            for condition in r.conditions {
                assert!(known.contains(condition), "{}: {condition}", r.name);
            }
            assert!(!r.meaning.is_empty() && !r.action.is_empty(), "{}", r.name);
        }
        assert_eq!(find("NotFound").map(|r| r.stage), Some(Stage::Source));
    }
}

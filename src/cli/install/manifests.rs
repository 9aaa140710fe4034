//! The release manifests: deploy/ (compiled into the binary) built by pallet's own kustomize
//! format with what `pallet install` was asked for: the image, the namespace, shards, and the
//! least-privilege component. With the defaults they are exactly what `kustomize build deploy/`
//! gives (a test compares them), so deploy/ is the one source of every way pallet is installed.

use std::path::Path;

use anyhow::{bail, Context as _};
use pallet_formats::{Object, Scope};
use serde_json::{json, Value};

/// The namespace deploy/ installs into.
pub const DEFAULT_NAMESPACE: &str = "pallet-system";

/// The name of the agent's ServiceAccount, Deployment and roles in deploy/.
pub const AGENT_NAME: &str = "pallet-agent";

/// The image name deploy/ uses, replaced by the image given.
const IMAGE_NAME: &str = "pallet";

/// Every file of deploy/ the manifests are built from (the chart and monitoring/ aside), by
/// path under deploy/.
pub const DEPLOY_FILES: &[(&str, &str)] = &[
    (
        "kustomization.yaml",
        include_str!("../../../deploy/kustomization.yaml"),
    ),
    (
        "namespace.yaml",
        include_str!("../../../deploy/namespace.yaml"),
    ),
    ("crd.yaml", include_str!("../../../deploy/crd.yaml")),
    ("crd-set.yaml", include_str!("../../../deploy/crd-set.yaml")),
    (
        "serviceaccount.yaml",
        include_str!("../../../deploy/serviceaccount.yaml"),
    ),
    ("rbac.yaml", include_str!("../../../deploy/rbac.yaml")),
    (
        "rbac-install.yaml",
        include_str!("../../../deploy/rbac-install.yaml"),
    ),
    (
        "admission-policy.yaml",
        include_str!("../../../deploy/admission-policy.yaml"),
    ),
    (
        "tenant-role.yaml",
        include_str!("../../../deploy/tenant-role.yaml"),
    ),
    (
        "agent/kustomization.yaml",
        include_str!("../../../deploy/agent/kustomization.yaml"),
    ),
    (
        "agent/deployment.yaml",
        include_str!("../../../deploy/agent/deployment.yaml"),
    ),
    (
        "agent/service.yaml",
        include_str!("../../../deploy/agent/service.yaml"),
    ),
    (
        "agent/poddisruptionbudget.yaml",
        include_str!("../../../deploy/agent/poddisruptionbudget.yaml"),
    ),
    (
        "agent/networkpolicy.yaml",
        include_str!("../../../deploy/agent/networkpolicy.yaml"),
    ),
    (
        "components/least-privilege/kustomization.yaml",
        include_str!("../../../deploy/components/least-privilege/kustomization.yaml"),
    ),
    (
        "components/least-privilege/rbac-read.yaml",
        include_str!("../../../deploy/components/least-privilege/rbac-read.yaml"),
    ),
    (
        "components/web-view/kustomization.yaml",
        include_str!("../../../deploy/components/web-view/kustomization.yaml"),
    ),
    (
        "components/web-view/rbac.yaml",
        include_str!("../../../deploy/components/web-view/rbac.yaml"),
    ),
    (
        "shards/kustomization.yaml",
        include_str!("../../../deploy/shards/kustomization.yaml"),
    ),
    (
        "shards/base/kustomization.yaml",
        include_str!("../../../deploy/shards/base/kustomization.yaml"),
    ),
    (
        "shards/shard-a/kustomization.yaml",
        include_str!("../../../deploy/shards/shard-a/kustomization.yaml"),
    ),
    (
        "shards/shard-b/kustomization.yaml",
        include_str!("../../../deploy/shards/shard-b/kustomization.yaml"),
    ),
];

/// What to install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestOptions {
    /// The agent's image reference (`registry/pallet:tag` or `registry/pallet@sha256:…`).
    pub image: String,
    /// The namespace of the agent.
    pub namespace: String,
    /// Shard keys: one more agent per key (see deploy/shards/).
    pub shards: Vec<String>,
    /// Without the broad grant (deploy/components/least-privilege).
    pub least_privilege: bool,
}

/// The kustomize `images` entry that sets `pallet` to `reference`.
fn image_entry(reference: &str) -> anyhow::Result<Value> {
    if reference.is_empty() || reference.contains(char::is_whitespace) {
        bail!("--image {reference:?} is not an image reference");
    }
    if let Some((name, digest)) = reference.split_once('@') {
        if !digest.starts_with("sha256:") || digest.len() != 71 {
            bail!("--image {reference:?}: a digest is sha256: and 64 hex digits");
        }
        return Ok(json!({"name": IMAGE_NAME, "newName": name, "digest": digest}));
    }
    let last_slash = reference.rfind('/').map_or(0, |i| i + 1);
    Ok(match reference[last_slash..].rsplit_once(':') {
        Some((_, tag)) => {
            let name = &reference[..reference.len() - tag.len() - 1];
            json!({"name": IMAGE_NAME, "newName": name, "newTag": tag})
        }
        None => json!({"name": IMAGE_NAME, "newName": reference}),
    })
}

/// A shard key as deploy/shards takes it: it becomes part of object names and labels.
fn check_shard_key(key: &str) -> anyhow::Result<()> {
    let valid = !key.is_empty()
        && key.len() <= 40
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !key.starts_with('-')
        && !key.ends_with('-');
    if !valid {
        bail!("shard key {key:?}: use lower-case letters, digits and '-' (at most 40)");
    }
    Ok(())
}

/// The overlay of one shard, as deploy/shards/shard-a is for shard `a`.
fn shard_overlay(key: &str) -> Value {
    json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../../deploy/shards/base"],
        "nameSuffix": format!("-shard-{key}"),
        "labels": [{"pairs": {"app.kubernetes.io/name": format!("pallet-agent-shard-{key}"),
                              "pallet.dev/shard": key},
                    "includeSelectors": true}],
        "patches": [{"target": {"kind": "Deployment"},
                     "patch": format!("- op: add\n  path: /spec/template/spec/containers/0/args/-\n  value: --shard={key}\n")}],
    })
}

fn write(root: &Path, path: &str, text: &str) -> anyhow::Result<()> {
    let file = root.join(path);
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))
}

/// The objects to install, in the order kustomize prints them (namespaces and CRDs first).
pub fn manifests(options: &ManifestOptions) -> anyhow::Result<Vec<Object>> {
    let scratch = tempfile::tempdir().context("creating a scratch directory")?;
    let root = scratch.path();
    for (path, text) in DEPLOY_FILES {
        write(root, &format!("deploy/{path}"), text)?;
    }
    let mut resources = vec![json!("../deploy")];
    for key in &options.shards {
        check_shard_key(key)?;
        let overlay = serde_json::to_string_pretty(&shard_overlay(key))?;
        write(
            root,
            &format!("install/shard-{key}/kustomization.yaml"),
            &overlay,
        )?;
        resources.push(json!(format!("shard-{key}")));
    }
    let mut kustomization = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
        "images": [image_entry(&options.image)?],
    });
    if options.least_privilege {
        kustomization["components"] = json!(["../deploy/components/least-privilege"]);
    }
    if options.namespace != DEFAULT_NAMESPACE {
        kustomization["namespace"] = json!(options.namespace);
    }
    write(
        root,
        "install/kustomization.yaml",
        &serde_json::to_string_pretty(&kustomization)?,
    )?;
    let mut objects = pallet_formats::kustomize::build(root, "install")
        .map_err(|e| anyhow::anyhow!("building the release manifests: {e}"))?;
    // kustomize's namespace transformer does not know every cluster-scoped kind (the admission
    // policy): such objects carry no namespace. The policy names the agent's namespace (where a
    // kubeConfig Secret reference without one points) in an expression.
    for object in &mut objects {
        if object.kind() == "ValidatingAdmissionPolicy" && options.namespace != DEFAULT_NAMESPACE {
            let quoted = format!("'{DEFAULT_NAMESPACE}'");
            let mut text = serde_json::to_string(object.body()).unwrap_or_default();
            if text.contains(&quoted) {
                text = text.replace(&quoted, &format!("'{}'", options.namespace));
                if let Ok(Value::Object(body)) = serde_json::from_str(&text) {
                    *object.body_mut() = body;
                }
            }
        }
        if pallet_formats::scope::builtin_scope(object.group(), object.kind())
            == Some(Scope::Cluster)
        {
            if let Some(Value::Object(metadata)) = object.body_mut().get_mut("metadata") {
                metadata.remove("namespace");
            }
        }
    }
    Ok(objects)
}

/// `objects` as YAML documents, each starting with `---`.
pub fn to_yaml(objects: &[Object]) -> anyhow::Result<String> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&crate::cli::to_yaml(&Value::Object(object.body().clone()))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> ManifestOptions {
        ManifestOptions {
            image: "registry.example/pallet@sha256:".to_string() + &"a".repeat(64),
            namespace: DEFAULT_NAMESPACE.into(),
            shards: Vec::new(),
            least_privilege: false,
        }
    }

    fn find<'a>(objects: &'a [Object], kind: &str, name: &str) -> Option<&'a Object> {
        objects
            .iter()
            .find(|o| o.kind() == kind && o.name() == name)
    }

    #[test]
    fn every_file_of_deploy_is_compiled_in() {
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
        let mut on_disk = Vec::new();
        let mut stack = vec![deploy.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let relative = path
                    .strip_prefix(&deploy)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if relative == "chart" || relative == "monitoring" {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                } else {
                    on_disk.push(relative);
                }
            }
        }
        on_disk.sort();
        let mut compiled: Vec<String> = DEPLOY_FILES.iter().map(|(p, _)| p.to_string()).collect();
        compiled.sort();
        assert_eq!(compiled, on_disk);
    }

    #[test]
    fn the_image_is_pinned_where_given_by_digest() {
        let objects = manifests(&options()).unwrap();
        let deployment = find(&objects, "Deployment", "pallet-agent").unwrap();
        assert_eq!(
            deployment.body()["spec"]["template"]["spec"]["containers"][0]["image"],
            json!(options().image)
        );
        assert!(find(&objects, "ClusterRole", "pallet-agent-install").is_some());
        assert!(find(
            &objects,
            "CustomResourceDefinition",
            "bundledeployments.pallet.dev"
        )
        .is_some());
        let tagged = ManifestOptions {
            image: "localhost:5000/team/pallet:1.2.3".into(),
            ..options()
        };
        let objects = manifests(&tagged).unwrap();
        let deployment = find(&objects, "Deployment", "pallet-agent").unwrap();
        assert_eq!(
            deployment.body()["spec"]["template"]["spec"]["containers"][0]["image"],
            json!("localhost:5000/team/pallet:1.2.3")
        );
        assert!(image_entry("registry.example/pallet@md5:00").is_err());
    }

    #[test]
    fn another_namespace_moves_every_namespaced_object_and_binding() {
        let objects = manifests(&ManifestOptions {
            namespace: "ops".into(),
            ..options()
        })
        .unwrap();
        assert!(find(&objects, "Namespace", "ops").is_some());
        for object in &objects {
            let scope = pallet_formats::scope::builtin_scope(object.group(), object.kind());
            match scope {
                Some(Scope::Cluster) => assert_eq!(object.namespace(), None, "{}", object.key()),
                _ => assert_eq!(object.namespace(), Some("ops"), "{}", object.key()),
            }
        }
        let binding = find(&objects, "ClusterRoleBinding", "pallet-agent").unwrap();
        assert_eq!(binding.body()["subjects"][0]["namespace"], json!("ops"));
        // A kubeConfig Secret reference without a namespace means the agent's, in the policy too.
        let policy = find(
            &objects,
            "ValidatingAdmissionPolicy",
            "pallet-bundle-deployment-author",
        )
        .unwrap();
        let text = serde_json::to_string(policy.body()).unwrap();
        assert!(text.contains("'ops'"), "{text}");
        assert!(!text.contains("'pallet-system'"), "{text}");
    }

    #[test]
    fn least_privilege_drops_the_broad_grant_and_requires_service_accounts() {
        let objects = manifests(&ManifestOptions {
            least_privilege: true,
            shards: vec!["blue".into()],
            ..options()
        })
        .unwrap();
        assert!(find(&objects, "ClusterRole", "pallet-agent-install").is_none());
        assert!(find(&objects, "ClusterRoleBinding", "pallet-agent-install").is_none());
        assert!(find(&objects, "ClusterRole", "pallet-agent-read").is_some());
        for name in ["pallet-agent", "pallet-agent-shard-blue"] {
            let deployment = find(&objects, "Deployment", name).unwrap();
            let args = &deployment.body()["spec"]["template"]["spec"]["containers"][0]["args"];
            assert!(
                args.as_array()
                    .unwrap()
                    .contains(&json!("--require-service-account")),
                "{name}: {args}"
            );
        }
        let shard = find(&objects, "Deployment", "pallet-agent-shard-blue").unwrap();
        let args = &shard.body()["spec"]["template"]["spec"]["containers"][0]["args"];
        assert!(args.as_array().unwrap().contains(&json!("--shard=blue")));
        // The sets are the whole cluster's: the main agent runs their controller, a shard not.
        assert!(args
            .as_array()
            .unwrap()
            .contains(&json!("--no-bundle-deployment-sets")));
        let main = find(&objects, "Deployment", "pallet-agent").unwrap();
        let main_args = &main.body()["spec"]["template"]["spec"]["containers"][0]["args"];
        assert!(!main_args
            .as_array()
            .unwrap()
            .contains(&json!("--no-bundle-deployment-sets")));
        assert!(find(&objects, "PodDisruptionBudget", "pallet-agent-shard-blue").is_some());
        assert!(manifests(&ManifestOptions {
            shards: vec!["Bad_Key".into()],
            ..options()
        })
        .is_err());
    }
}

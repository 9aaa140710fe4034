//! `pallet plan` against the local control plane and fixture servers: the per-object diff from a
//! server-side dry-run, prunes from the live inventory, the RBAC summary, conflicts; and
//! `plan --pin` applied to the cluster → the agent installs exactly what was previewed, and
//! moving the tag and branch upstream changes nothing.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::time::Duration;

use cli::{create_bd, delete_bd, write_status};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

fn config_map(name: &str, data: &str) -> String {
    format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata: {data}\n")
}

async fn create_namespace(client: &Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
}

/// Applies a ConfigMap as `manager`, with `labels`.
async fn seed(cms: &Api<ConfigMap>, manager: &str, name: &str, labels: Value, data: Value) {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": name, "labels": labels}, "data": data});
    cms.patch(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&body),
    )
    .await
    .unwrap();
}

fn bd_manifest(name: &str, namespace: &str, sources: &str) -> String {
    format!(
        "apiVersion: pallet.dev/v1alpha1\nkind: BundleDeployment\nmetadata:\n  name: {name}\n  labels: {{pallet.dev/test: {name}}}\n\
         spec:\n  installNamespace: {namespace}\n  format: plain\n  sources:\n{sources}"
    )
}

#[tokio::test]
async fn plan_shows_changes_prunes_and_rbac_and_writes_nothing() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("plan");
    create_namespace(&client, &name).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let owned = json!({"pallet.dev/bundle-deployment": name});
    // As a previous revision left them (written by pallet's field manager, labelled).
    seed(&cms, "pallet", "same", owned.clone(), json!({"v": "1"})).await;
    seed(
        &cms,
        "pallet",
        "changed",
        owned.clone(),
        json!({"v": "old", "gone": "x"}),
    )
    .await;
    seed(&cms, "pallet", "old", owned.clone(), json!({"v": "1"})).await;
    // Created outside pallet: the default collisionProtection (IfNoOwner) takes it over.
    seed(
        &cms,
        "someone",
        "adopted",
        json!({"app": "x"}),
        json!({"v": "1"}),
    )
    .await;

    let role = format!("{name}-role");
    let mut bundle = config_map("same", "{v: \"1\"}")
        + &config_map("changed", "{v: new}")
        + &config_map("adopted", "{v: \"1\"}")
        + &config_map("new", "{v: \"1\"}");
    bundle += &format!(
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {role}}}\n\
         rules:\n- apiGroups: ['*']\n  resources: ['*']\n  verbs: ['*']\n\
         - apiGroups: ['']\n  resources: [configmaps]\n  verbs: [get, list]\n\
         ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {role}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\n\
         subjects:\n- {{kind: ServiceAccount, name: operator, namespace: {name}}}\n"
    );
    let repo = fx.git_repo(&name);
    repo.commit_files("main", &[("manifests/all.yaml", bundle.as_bytes())], "v2");
    let work = tempfile::tempdir().unwrap();
    let manifest = work.path().join("bd.yaml");
    std::fs::write(
        &manifest,
        bd_manifest(
            &name,
            &name,
            &format!(
                "  - kind: git\n    git: {{repository: \"{}\", ref: {{branch: main}}}}\n",
                repo.url(fx.git_plain())
            ),
        ),
    )
    .unwrap();
    // The live BundleDeployment (no agent runs for it) with the previous revision's inventory.
    create_bd(
        &client,
        &name,
        json!({"format": "plain", "installNamespace": name,
               "sources": [{"kind": "git", "git": {"repository": repo.url(fx.git_plain()), "ref": {"branch": "main"}}}]}),
        json!({}),
    )
    .await;
    let inventory: Vec<Value> = ["same", "changed", "old"]
        .iter()
        .map(|n| json!({"version": "v1", "kind": "ConfigMap", "namespace": name, "name": n}))
        .collect();
    write_status(
        &client,
        &name,
        json!({"inventory": {"count": 3, "objects": inventory}}),
    )
    .await;

    let cache = work.path().join("cache");
    let args = [
        "plan",
        "-f",
        manifest.to_str().unwrap(),
        "--allow-loopback-egress",
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    let out = cli::pallet_ok(&args);
    for expected in [
        format!("create     ConfigMap {name}/new\n"),
        format!("update     ConfigMap {name}/changed (.data.gone, .data.v)\n"),
        format!("unchanged  ConfigMap {name}/same\n"),
        format!(
            "update     ConfigMap {name}/adopted (.metadata.labels.pallet.dev/bundle-deployment) [takes over from no owner]\n"
        ),
        format!("create     ClusterRole.rbac.authorization.k8s.io {role}\n"),
        format!("delete     ConfigMap {name}/old\n"),
        "    * on * (*)  ! wildcard verbs (*); wildcard resources (*); wildcard apiGroups (*)\n".to_string(),
        "    get,list on configmaps (core)\n".to_string(),
        format!(
            "ClusterRoleBinding.rbac.authorization.k8s.io {role} grants ClusterRole/{role} to ServiceAccount {name}/operator"
        ),
        "Summary: 3 to create, 2 to update, 1 unchanged, 1 to prune; 3 RBAC warning(s)".to_string(),
    ] {
        assert!(out.contains(&expected), "missing {expected:?} in:\n{out}");
    }
    // Cluster-scoped RBAC is applied before namespaced objects, as the agent stages it.
    assert!(
        out.find("ClusterRole.rbac").unwrap() < out.find(&format!("ConfigMap {name}/new")).unwrap()
    );

    let json: Value =
        serde_json::from_str(&cli::pallet_ok(&[&args[..], &["-o", "json"]].concat())).unwrap();
    let changed = json["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "changed")
        .unwrap();
    assert_eq!(changed["action"], "update");
    assert_eq!(changed["fields"], json!([".data.gone", ".data.v"]));
    assert_eq!(json["prune"], json!([format!("ConfigMap {name}/old")]));
    assert!(json["rbac"]["warnings"]
        .as_array()
        .unwrap()
        .contains(&json!("wildcard verbs (*)")));

    // A dry run writes nothing.
    assert!(cms.get_opt("new").await.unwrap().is_none());
    assert_eq!(cms.get("changed").await.unwrap().data.unwrap()["v"], "old");
    assert!(!cms
        .get("adopted")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap()
        .contains_key("pallet.dev/bundle-deployment"));

    // An object owned by another BundleDeployment is a conflict: shown, and plan fails.
    seed(
        &cms,
        "pallet",
        "taken",
        json!({"pallet.dev/bundle-deployment": "someone-else"}),
        json!({"v": "1"}),
    )
    .await;
    repo.commit_files(
        "main",
        &[(
            "manifests/all.yaml",
            (bundle + &config_map("taken", "{v: \"2\"}")).as_bytes(),
        )],
        "v3",
    );
    let failed = cli::pallet(&args);
    assert!(!failed.status.success());
    let stdout = String::from_utf8_lossy(&failed.stdout);
    assert!(
        stdout.contains(&format!(
            "conflict   ConfigMap {name}/taken (owned by BundleDeployment someone-else; collisionProtection IfNoOwner forbids taking it over)"
        )),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&failed.stderr)
        .contains("1 object(s) would be refused or are owned by someone else"));

    delete_bd(&client, &name).await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&name, &DeleteParams::default())
        .await;
    let _ = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(client.clone())
        .delete(&role, &DeleteParams::default())
        .await;
}

async fn value_of(cms: &Api<ConfigMap>, name: &str) -> Result<String, String> {
    let cm = cms
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{name} not there yet"))?;
    Ok(cm
        .data
        .unwrap_or_default()
        .get("v")
        .cloned()
        .unwrap_or_default())
}

#[tokio::test]
async fn pinned_plan_applied_installs_exactly_what_was_previewed() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let registry = fx.registry_plain();
    let name = support::unique_name("pin");
    let work = tempfile::tempdir().unwrap();

    // v1 upstream: an image tag, a git branch and an http file.
    let push = |version: &str| {
        let dir = work.path().join(format!("image-{version}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("cm.yaml"),
            config_map("from-image", &format!("{{v: {version}}}")),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pallet"))
            .args([
                "push",
                dir.to_str().unwrap(),
                &format!("{}/{name}:stable", registry.host),
                "--plain-http",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let image_v1 = push("v1");
    let repo = fx.git_repo(&name);
    let commit_v1 = repo.commit_files(
        "main",
        &[("cm.yaml", config_map("from-git", "{v: v1}").as_bytes())],
        "v1",
    );
    let http_content = config_map("from-http", "{v: v1}");
    let http_path = fx.put_file(&format!("{name}/cm.yaml"), http_content.as_bytes());
    let sources = format!(
        "  - kind: image\n    destination: image\n    image: {{ref: \"{}/{name}:stable\"}}\n    pollInterval: 1s\n\
         \x20 - kind: git\n    destination: git\n    git: {{repository: \"{}\", ref: {{branch: main}}}}\n    pollInterval: 1s\n\
         \x20 - kind: http\n    destination: http\n    http: {{url: \"{}\"}}\n",
        registry.host,
        repo.url(fx.git_plain()),
        fx.http_plain().url_for(&http_path)
    );
    let pinned_ns = name.clone();
    let floating = format!("{name}-f");
    let manifest = work.path().join("bd.yaml");
    std::fs::write(&manifest, bd_manifest(&name, &pinned_ns, &sources)).unwrap();

    let out = cli::pallet(&[
        "plan",
        "-f",
        manifest.to_str().unwrap(),
        "--pin",
        "--allow-loopback-egress",
        "--cache-dir",
        work.path().join("cache").to_str().unwrap(),
        "--plain-http-registry",
        &registry.host,
    ]);
    let (pinned, review) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(out.status.success(), "{review}");
    // The review (on stderr) shows the same refs the pinned manifest carries.
    assert!(
        review.contains(&format!("-> {image_v1}")) && review.contains(&format!("-> {commit_v1}")),
        "{review}"
    );
    let doc: Value = serde_saphyr::from_str(&pinned).unwrap();
    let sources = &doc["spec"]["sources"];
    assert_eq!(sources[0]["image"]["ref"], json!(image_v1));
    assert_eq!(sources[1]["git"]["ref"], json!({"commit": commit_v1}));
    let http_sha = format!(
        "{:x}",
        <sha2::Sha256 as sha2::Digest>::digest(http_content.as_bytes())
    );
    assert_eq!(sources[2]["http"]["sha256"], json!(http_sha));
    assert!(!pinned.contains("pollInterval"), "{pinned}");

    // Apply the pinned manifest as a user would, and the original (floating) one under another
    // name as a control that shows the agent does follow upstream moves.
    let pinned_file = work.path().join("pinned.yaml");
    std::fs::write(&pinned_file, &pinned).unwrap();
    let floating_file = work.path().join("floating.yaml");
    std::fs::write(
        &floating_file,
        bd_manifest(&floating, &floating, &sources_text(&manifest)).replace(
            &format!("pallet.dev/test: {floating}"),
            &format!("pallet.dev/test: {name}"),
        ),
    )
    .unwrap();
    for bd in [&name, &floating] {
        cluster::track_bundle_deployment(bd);
    }
    let kubectl = cluster::kubectl_path();
    for file in [&pinned_file, &floating_file] {
        let applied = std::process::Command::new(&kubectl)
            .args(["apply", "--server-side", "-f", file.to_str().unwrap()])
            .env("KUBECONFIG", cluster::kubeconfig_path())
            .output()
            .unwrap();
        assert!(
            applied.status.success(),
            "{}",
            String::from_utf8_lossy(&applied.stderr)
        );
    }
    let agent = agent::Agent::start_with(&name, &["--plain-http-registry", &registry.host]);
    let bd = agent::wait_condition(&client, &agent, &name, "Ready", "True", "").await;
    agent::wait_condition(&client, &agent, &floating, "Ready", "True", "").await;
    let pinned_cms: Api<ConfigMap> = Api::namespaced(client.clone(), &pinned_ns);
    let floating_cms: Api<ConfigMap> = Api::namespaced(client.clone(), &floating);
    for cm in ["from-image", "from-git", "from-http"] {
        assert_eq!(value_of(&pinned_cms, cm).await.unwrap(), "v1", "{cm}");
    }
    // The revision the agent recorded resolved to exactly the previewed refs.
    let revision = bd
        .status
        .as_ref()
        .and_then(|s| s.revisions.first())
        .expect("the agent records a revision");
    let resolved: Vec<&str> = revision
        .sources
        .iter()
        .map(|s| s.resolved.as_str())
        .collect();
    assert_eq!(
        resolved,
        [
            image_v1.as_str(),
            commit_v1.as_str(),
            &format!("sha256:{http_sha}")
        ]
    );

    // Upstream moves: the tag and the branch now point at v2.
    push("v2");
    repo.commit_files(
        "main",
        &[("cm.yaml", config_map("from-git", "{v: v2}").as_bytes())],
        "v2",
    );
    for cm in ["from-image", "from-git"] {
        let floating_cms = floating_cms.clone();
        cluster::poll_until(
            &format!("the floating BundleDeployment to follow {cm} to v2"),
            Duration::from_secs(60),
            || {
                let cms = floating_cms.clone();
                async move {
                    match value_of(&cms, cm).await? {
                        v if v == "v2" => Ok(()),
                        v => Err(v),
                    }
                }
            },
        )
        .await;
    }
    // The agent has re-resolved since (the control moved); the pinned one stays where it was.
    for cm in ["from-image", "from-git", "from-http"] {
        assert_eq!(value_of(&pinned_cms, cm).await.unwrap(), "v1", "{cm}");
    }
    let bd = cli::get_bd(&client, &name).await;
    let status = bd.status.unwrap();
    let ready = pallet::api::conditions::find(&status.conditions, "Ready")
        .cloned()
        .unwrap();
    assert_eq!(ready.status, "True", "{}", ready.message);
    assert_eq!(
        status.revisions.len(),
        1,
        "the pinned BundleDeployment made a new revision"
    );

    for bd in [&name, &floating] {
        delete_bd(&client, bd).await;
    }
    for bd in [&name, &floating] {
        agent::wait_bd_gone(&client, bd).await;
    }
    drop(agent);
    for ns in [&pinned_ns, &floating] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}

/// The `sources:` block of a manifest written by [`bd_manifest`].
fn sources_text(manifest: &std::path::Path) -> String {
    let text = std::fs::read_to_string(manifest).unwrap();
    let start = text.find("  sources:\n").unwrap() + "  sources:\n".len();
    text[start..].to_string()
}

/// `pallet plan` reads `config.helm.valuesFrom` as the agent does: the plan lists each reference's
/// digest and the objects rendered with its values (here, an object named by a value).
#[tokio::test]
async fn plan_renders_helm_charts_with_values_from_the_cluster() {
    let client = cluster::client().await;
    cluster::install_crd(&client).await;
    let fx = support::Fixtures::load();
    let name = support::unique_name("planvals");
    let work = tempfile::tempdir().unwrap();
    let chart = work.path().join("chart");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: app\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(chart.join("values.yaml"), "objectName: from-chart\n").unwrap();
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Values.objectName }}}\n",
    )
    .unwrap();
    let repo = fx.git_repo(&name);
    repo.commit_dir("main", &chart, "chart");
    let values_cm = format!("{name}-values");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "pallet-system");
    seed(
        &cms,
        cluster::TEST_FIELD_MANAGER,
        &values_cm,
        // Given to this BundleDeployment: the agent's namespace is no pool.
        json!({format!("access.pallet.dev/{name}"): "true"}),
        json!({"values.yaml": format!("objectName: {name}-from-configmap\n")}),
    )
    .await;
    let manifest = work.path().join("bd.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: pallet.dev/v1alpha1\nkind: BundleDeployment\nmetadata: {{name: {name}}}\n\
             spec:\n  installNamespace: {name}\n  format: helm\n  sources:\n\
             \x20 - kind: git\n    git: {{repository: \"{}\", ref: {{branch: main}}}}\n\
             \x20 config:\n    helm:\n      valuesFrom: [{{kind: ConfigMap, name: {values_cm}}}]\n",
            repo.url(fx.git_plain()),
        ),
    )
    .unwrap();
    let cache = work.path().join("cache");
    let out = cli::pallet_ok(&[
        "plan",
        "-f",
        manifest.to_str().unwrap(),
        "--allow-loopback-egress",
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    let _ = cms.delete(&values_cm, &DeleteParams::default()).await;
    assert!(out.contains("Values from:"), "{out}");
    assert!(
        out.contains(&format!("  ConfigMap pallet-system/{values_cm} -> sha256:")),
        "{out}"
    );
    assert!(
        out.contains(&format!("ConfigMap {name}/{name}-from-configmap")),
        "{out}"
    );
}

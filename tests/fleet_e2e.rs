//! End-to-end: a BundleDeploymentSet on the two target clusters `tools/clusters.sh start` runs
//! beside the management one, deployed by the `pallet agent` binary, its bundles served by the
//! fixtures' HTTP server. One scenario, as a user lives it: the set stamps a BundleDeployment
//! per cluster with that cluster's variables; a new version rolls out one cluster at a time in
//! the order the set gives; a version that fails its health check on one cluster halts the
//! rollout there (that cluster rolls itself back, the other keeps its last healthy version, the
//! set says which cluster failed and why); a requested rollback of the set returns every
//! cluster to the version before; a fixed version rolls out again.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/remote.rs"]
mod remote;
mod support;

use std::time::Duration;

use agent::{Agent, TEST_LABEL};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use pallet::api::conditions::find;
use pallet::api::{
    BundleDeployment, BundleDeploymentSet, SetClusterPhase, SET_PREVIOUS_ANNOTATION,
};
use pallet::fleet::plan::revision_of;
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(120);
/// The order the set rolls out in: not the clusters' names' order, so that the test tells the
/// set's order from the default one.
const ORDER: [&str; 2] = ["target-b", "target-a"];

/// Deletes the set (its BundleDeployments go with it) and the namespaces the bundle made, on
/// every cluster, whether the test passed or not. Best effort, with kubectl.
struct Cleanup {
    name: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let kubectl = |kubeconfig: &std::path::Path, args: &[&str]| {
            let _ = std::process::Command::new(cluster::kubectl_path())
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(args)
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .status();
        };
        let management = cluster::kubeconfig_path();
        kubectl(
            &management,
            &[
                "delete",
                "bundledeploymentsets.pallet.dev",
                &self.name,
                "--ignore-not-found",
                "--wait=false",
            ],
        );
        let stamped: Vec<String> = ORDER.iter().map(|c| format!("{}-{c}", self.name)).collect();
        cluster::remove_bundle_deployments(&stamped);
        for cluster in ORDER {
            kubectl(
                &management,
                &[
                    "label",
                    "secret",
                    "-n",
                    cluster::AGENT_NAMESPACE,
                    cluster,
                    &format!("access.pallet.dev/{}-{cluster}-", self.name),
                ],
            );
        }
        let mut kubeconfigs = vec![management];
        kubeconfigs.extend(ORDER.iter().map(|c| remote::kubeconfig(c)));
        for kubeconfig in kubeconfigs {
            kubectl(
                &kubeconfig,
                &[
                    "delete",
                    "namespace",
                    &self.name,
                    "--ignore-not-found",
                    "--wait=false",
                ],
            );
        }
    }
}

struct Scenario {
    /// Where each cluster's objects are: the target's admin client, by name.
    targets: Vec<(String, Client)>,
    name: String,
    sets: Api<BundleDeploymentSet>,
    bds: Api<BundleDeployment>,
}

impl Scenario {
    /// Publishes version `version` of the bundle (one ConfigMap per cluster, named and filled
    /// from the cluster's variables) and returns its URL.
    fn publish(&self, version: &str) -> String {
        let manifest = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-${{cluster}}\ndata:\n  version: {version}\n  cluster: ${{cluster}}\n  state: ${{state}}\n"
        );
        let fixtures = support::Fixtures::load();
        let path = fixtures.put_file(
            &format!("{}/{version}.yaml", self.name),
            manifest.as_bytes(),
        );
        fixtures.http_plain().url_for(&path)
    }

    /// The set's spec at bundle `url`, with `broken` getting `state: broken` (its health check
    /// then fails).
    fn spec(&self, url: &str, broken: Option<&str>) -> Value {
        let per_cluster: Vec<Value> = ORDER
            .iter()
            .map(|cluster| {
                let mut vars = json!({"cluster": cluster});
                if broken == Some(*cluster) {
                    vars["state"] = json!("broken");
                }
                json!({"cluster": cluster, "vars": vars})
            })
            .collect();
        json!({
            "clusterSelector": {
                "matchLabels": {"pallet.dev/cluster": "true"},
                "matchExpressions": [{"key": "pallet.dev/test-cluster", "operator": "In", "values": ORDER}],
            },
            "template": {
                "metadata": {"labels": {TEST_LABEL: self.name}},
                "spec": {
                    "installNamespace": self.name,
                    "format": "plain",
                    "sources": [{"kind": "http", "http": {"url": url}}],
                    "processors": [{"substitute": {"vars": {"state": "ok"}}}],
                    "healthChecks": [{
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "current": "self.data.state == 'ok'",
                        "failed": "self.data.state == 'broken'",
                    }],
                },
            },
            "perCluster": per_cluster,
            "rollout": {"maxUpdating": 1, "order": ORDER},
        })
    }

    async fn apply(&self, spec: Value) {
        let set = json!({
            "apiVersion": "pallet.dev/v1alpha1",
            "kind": "BundleDeploymentSet",
            "metadata": {"name": self.name, "labels": {TEST_LABEL: self.name}},
            "spec": spec,
        });
        self.sets
            .patch(
                &self.name,
                &PatchParams::apply(cluster::TEST_FIELD_MANAGER).force(),
                &Patch::Apply(&set),
            )
            .await
            .unwrap_or_else(|e| panic!("the API server refused the set: {e}"));
    }

    /// Waits until the set's status is of its generation, at `revision`, and `check` holds.
    async fn wait_set(
        &self,
        what: &str,
        revision: i64,
        check: impl Fn(&BundleDeploymentSet) -> Result<(), String>,
    ) -> BundleDeploymentSet {
        cluster::poll_until(what, DEADLINE, || async {
            let set = self.sets.get(&self.name).await.map_err(|e| e.to_string())?;
            let status = set.status.clone().unwrap_or_default();
            if status.observed_generation != set.metadata.generation
                || status.revision != Some(revision)
            {
                return Err(format!("status: {status:?}"));
            }
            check(&set).map_err(|why| format!("{why}; status: {status:?}"))?;
            Ok(set)
        })
        .await
    }

    /// Waits until every cluster's ConfigMap is at `version` (its variables filled in).
    async fn wait_objects(&self, version: &str) {
        for (cluster, client) in &self.targets {
            let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &self.name);
            let name = format!("app-{cluster}");
            cluster::poll_until(
                &format!("{cluster}: ConfigMap {name} at {version}"),
                DEADLINE,
                || async {
                    let cm = cms.get(&name).await.map_err(|e| e.to_string())?;
                    let data = cm.data.clone().unwrap_or_default();
                    let at = data.get("version").map(String::as_str) == Some(version)
                        && data.get("cluster") == Some(cluster);
                    at.then_some(()).ok_or_else(|| format!("data: {data:?}"))
                },
            )
            .await;
        }
    }

    async fn bd(&self, cluster: &str) -> BundleDeployment {
        self.bds
            .get(&format!("{}-{cluster}", self.name))
            .await
            .expect("the stamped BundleDeployment")
    }
}

fn ready(set: &BundleDeploymentSet) -> Result<(), String> {
    let conditions = set.status.as_ref().map(|s| s.conditions.clone());
    match find(&conditions.unwrap_or_default(), "Ready") {
        Some(c) if c.status == "True" => Ok(()),
        other => Err(format!("Ready: {other:?}")),
    }
}

/// Whether `bd` is Ready at its generation.
fn bd_ready(bd: &BundleDeployment) -> bool {
    let generation = bd.metadata.generation.unwrap_or_default();
    bd.status
        .as_ref()
        .is_some_and(|status| agent::is_ready(status, generation))
}

/// The BundleDeployment revision made from `bd`'s current generation.
fn current_revision(bd: &BundleDeployment) -> pallet::api::RevisionStatus {
    let generation = bd.metadata.generation.unwrap_or_default();
    bd.status
        .as_ref()
        .and_then(|s| s.revisions.iter().find(|r| r.generation == generation))
        .cloned()
        .unwrap_or_else(|| panic!("no revision of generation {generation}: {:?}", bd.status))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_rolls_out_in_waves_halts_on_a_failure_and_rolls_back() {
    // No other test stops a target while this one runs.
    let _outage = remote::outage_lock();
    let management = cluster::client().await;
    cluster::install_crd(&management).await;
    cluster::install_crd_from(&management, include_str!("../deploy/crd-set.yaml")).await;
    cluster::ensure_agent_namespace(&management).await;
    remote::write_secrets();
    let mut targets = Vec::new();
    for cluster in ORDER {
        targets.push((cluster.to_string(), remote::client(cluster).await));
    }
    let name = support::unique_name("fleet");
    let _cleanup = Cleanup { name: name.clone() };
    let scenario = Scenario {
        sets: Api::all(management.clone()),
        bds: Api::all(management.clone()),
        targets,
        name: name.clone(),
    };
    // The cluster Secrets are in the agent's namespace and the template names no
    // ServiceAccount: each stamped BundleDeployment may read its cluster's Secret once the
    // Secret is labelled for it (the guide's first way).
    let secrets: Api<Secret> = Api::namespaced(management.clone(), cluster::AGENT_NAMESPACE);
    for cluster in ORDER {
        cluster::track_bundle_deployment(&format!("{name}-{cluster}"));
        let label = format!("access.pallet.dev/{name}-{cluster}");
        secrets
            .patch(
                cluster,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {label: "true"}}})),
            )
            .await
            .unwrap();
    }
    let agent = Agent::start(&name);

    // Revision 1: a BundleDeployment per cluster, each with its cluster's variables.
    let v1 = scenario.publish("v1");
    scenario.apply(scenario.spec(&v1, None)).await;
    let set = scenario
        .wait_set("the set Ready at revision 1", 1, ready)
        .await;
    let clusters = &set.status.as_ref().unwrap().clusters;
    assert_eq!(
        clusters.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ORDER,
        "status lists the clusters in rollout order"
    );
    scenario.wait_objects("v1").await;
    for cluster in ORDER {
        let bd = scenario.bd(cluster).await;
        let kube_config = bd.spec.kube_config.as_ref().expect("spec.kubeConfig");
        assert_eq!(kube_config.secret_ref.name, cluster);
    }

    // Revision 2, in waves of one: the second cluster gets it only once the first is healthy
    // on it. Each look reads the second cluster before the first, so a second cluster seen
    // on revision 2 beside a first one not yet healthy on it is a wave broken.
    let v2 = scenario.publish("v2");
    scenario.apply(scenario.spec(&v2, None)).await;
    let (first, second) = (ORDER[0], ORDER[1]);
    let mut looks = 0;
    cluster::poll_until("both clusters healthy on revision 2", DEADLINE, || {
        looks += 1;
        let scenario = &scenario;
        async move {
            let later = scenario.bd(second).await;
            let earlier = scenario.bd(first).await;
            if revision_of(&later) == Some(2) {
                assert!(
                    revision_of(&earlier) == Some(2) && bd_ready(&earlier),
                    "{second} got revision 2 while {first} was not healthy on it: {:?}",
                    earlier.status
                );
            }
            if revision_of(&later) == Some(2) && bd_ready(&later) && bd_ready(&earlier) {
                Ok(())
            } else {
                Err(format!(
                    "{first}: {:?} ready {}; {second}: {:?} ready {}",
                    revision_of(&earlier),
                    bd_ready(&earlier),
                    revision_of(&later),
                    bd_ready(&later)
                ))
            }
        }
    })
    .await;
    // The revisions' own times say the same: the second cluster's was rendered no earlier
    // than the first's became healthy.
    let earlier = current_revision(&scenario.bd(first).await);
    let later = current_revision(&scenario.bd(second).await);
    let healthy_at = earlier
        .healthy_at
        .expect("the first cluster's healthy time")
        .0;
    let rendered_at = later
        .rendered_at
        .expect("the second cluster's render time")
        .0;
    assert!(
        rendered_at >= healthy_at,
        "{second}'s revision was rendered at {rendered_at}, before {first}'s was healthy at {healthy_at}"
    );
    scenario
        .wait_set("the set Ready at revision 2", 2, ready)
        .await;
    scenario.wait_objects("v2").await;

    // Revision 3 fails its health check on the first cluster: the rollout halts there; the
    // first cluster rolls itself back, the second never gets revision 3.
    let v3 = scenario.publish("v3");
    scenario.apply(scenario.spec(&v3, Some(first))).await;
    let set = scenario
        .wait_set("the set Halted at revision 3", 3, |set| {
            let status = set.status.as_ref().unwrap();
            match find(&status.conditions, "Halted") {
                Some(c) if c.status == "True" => Ok(()),
                other => Err(format!("Halted: {other:?}")),
            }
        })
        .await;
    let status = set.status.as_ref().unwrap();
    let ready_condition = find(&status.conditions, "Ready").unwrap();
    assert_eq!(ready_condition.status, "False");
    assert_eq!(ready_condition.reason, "Halted");
    assert!(
        ready_condition
            .message
            .contains(&format!("revision 3 failed on cluster {first}"))
            && ready_condition.message.contains("healthChecks[0]"),
        "the set names the failed cluster and why: {}",
        ready_condition.message
    );
    let by_name = |name: &str| {
        status
            .clusters
            .iter()
            .find(|c| c.name == name)
            .unwrap()
            .clone()
    };
    assert_eq!(by_name(first).phase, SetClusterPhase::Failed);
    assert!(by_name(first)
        .message
        .as_deref()
        .is_some_and(|m| m.contains("healthChecks[0]")));
    assert_eq!(by_name(second).phase, SetClusterPhase::Pending);
    assert_eq!(by_name(second).revision, Some(2));
    let held = scenario.bd(second).await;
    assert_eq!(
        revision_of(&held),
        Some(2),
        "the halted rollout held {second}"
    );
    assert!(bd_ready(&held));
    // Both clusters run version 2: the second kept it, the first rolled back to it.
    scenario.wait_objects("v2").await;

    // The CLI shows the same: the set with each cluster's phase, the bundles by cluster.
    let sets = cli::pallet_ok(&["sets", &name]);
    let phase_of = |text: &str, cluster: &str| {
        text.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|cells| cells.first() == Some(&cluster))
            .map(|cells| (cells[2].to_string(), cells[3].to_string()))
    };
    assert_eq!(
        phase_of(&sets, first),
        Some(("3".into(), "Failed".into())),
        "{sets}"
    );
    assert_eq!(
        phase_of(&sets, second),
        Some(("2".into(), "Pending".into())),
        "{sets}"
    );
    let selector = format!("{TEST_LABEL}={name}");
    let on_second = cli::pallet_ok(&["get", "-l", &selector, "--cluster", second]);
    let rows: Vec<Vec<&str>> = on_second
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().take(2).collect())
        .collect();
    assert_eq!(
        rows,
        [[format!("{name}-{second}").as_str(), second]],
        "{on_second}"
    );

    // A rollback of the set, as the guide says.
    let rolled = cli::pallet_ok(&["rollback", &name, "--set", "--wait", "--timeout", "2m"]);
    assert!(
        phase_of(&rolled, first).is_some_and(|(_, phase)| phase == "RolledBack"),
        "{rolled}"
    );
    let set = scenario
        .wait_set("the set RolledBack", 3, |set| {
            let status = set.status.as_ref().unwrap();
            if status.last_handled_rollback.is_none() {
                return Err("rollback not handled yet".into());
            }
            match find(&status.conditions, "RolledBack") {
                Some(c) if c.status == "True" => Ok(()),
                other => Err(format!("RolledBack: {other:?}")),
            }
        })
        .await;
    let status = set.status.as_ref().unwrap();
    assert_eq!(status.rolled_back_revision, Some(3));
    let rolled = status.clusters.iter().find(|c| c.name == first).unwrap();
    assert_eq!(rolled.phase, SetClusterPhase::RolledBack);
    // The first cluster's BundleDeployment is on the revision it had before the set moved it.
    let bd = scenario.bd(first).await;
    let previous: i64 = bd.metadata.annotations.as_ref().unwrap()[SET_PREVIOUS_ANNOTATION]
        .parse()
        .unwrap();
    cluster::poll_until(
        &format!("{first} active on its revision {previous}"),
        DEADLINE,
        || async {
            let bd = scenario.bd(first).await;
            let active = bd.status.as_ref().and_then(|s| s.active_revision);
            (active == Some(previous))
                .then_some(())
                .ok_or_else(|| format!("active {active:?}"))
        },
    )
    .await;
    scenario.wait_objects("v2").await;

    // A fixed version is a new revision, and rolls out to every cluster again.
    let v4 = scenario.publish("v4");
    scenario.apply(scenario.spec(&v4, None)).await;
    scenario
        .wait_set("the set Ready at revision 4", 4, ready)
        .await;
    scenario.wait_objects("v4").await;
    drop(agent);
}

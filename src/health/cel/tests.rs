use serde_json::json;

use super::*;

fn check(yaml: &str) -> HealthCheck {
    serde_saphyr::from_str(yaml).unwrap()
}

/// The design's example: an Argo CD Application judged by `status.health.status`.
fn application_check() -> HealthCheck {
    check(
        r#"
apiVersion: argoproj.io/v1alpha1
kind: Application
current: "self.status.health.status == 'Healthy'"
failed: "self.status.health.status == 'Degraded'"
"#,
    )
}

fn application(health: Option<&str>) -> Value {
    let mut object = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "web", "namespace": "argocd", "generation": 2},
    });
    if let Some(health) = health {
        object["status"] = json!({"health": {"status": health}});
    }
    object
}

fn assess(checks: &[HealthCheck], object: &Value) -> Option<Health> {
    compile(checks).unwrap().assess(object)
}

#[test]
fn current_failed_and_neither() {
    let checks = [application_check()];
    let healthy = assess(&checks, &application(Some("Healthy"))).unwrap();
    assert_eq!(healthy.state, HealthState::Current);
    let degraded = assess(&checks, &application(Some("Degraded"))).unwrap();
    assert_eq!(degraded.state, HealthState::Failed);
    assert!(
        degraded
            .message
            .contains("healthChecks[0] (argoproj.io/v1alpha1 Application)")
            && degraded.message.contains("failed is true"),
        "{}",
        degraded.message
    );
    let progressing = assess(&checks, &application(Some("Progressing"))).unwrap();
    assert_eq!(progressing.state, HealthState::InProgress);
    assert!(progressing.message.contains("current is not true yet"));
}

#[test]
fn an_expression_that_errors_leaves_the_object_in_progress_and_says_why() {
    // No status at all: `self.status.health` has no such key.
    let health = assess(&[application_check()], &application(None)).unwrap();
    assert_eq!(health.state, HealthState::InProgress);
    assert!(
        health.message.contains("could not be evaluated")
            && health
                .message
                .contains("self.status.health.status == 'Degraded'"),
        "{}",
        health.message
    );
    // A result that is not a bool is an error too, never healthy.
    let odd = check("{apiVersion: v1, kind: ConfigMap, current: \"self.metadata.name\"}");
    let health = assess(
        &[odd],
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
    )
    .unwrap();
    assert_eq!(health.state, HealthState::InProgress);
    assert!(health.message.contains("not a bool"), "{}", health.message);
}

#[test]
fn in_progress_is_checked_first_then_failed_then_current() {
    let checks = [check(
        r#"
apiVersion: example.com/v1
kind: Widget
inProgress: "status.phase == 'Busy' || status.phase == 'Broken'"
failed: "status.phase == 'Broken' || status.phase == 'Done'"
current: "status.phase == 'Done'"
"#,
    )];
    let widget = |phase: &str| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
               "status": {"phase": phase}})
    };
    let state = |phase| assess(&checks, &widget(phase)).unwrap().state;
    assert_eq!(state("Broken"), HealthState::InProgress);
    assert_eq!(state("Done"), HealthState::Failed);
    assert_eq!(state("Other"), HealthState::InProgress);
}

#[test]
fn flux_expressions_work_as_written() {
    // From Flux's CEL cheatsheet: top-level fields as variables, macros, optional values.
    let checks = [check(
        r#"
apiVersion: cert-manager.io/v1
kind: Certificate
inProgress: "status.?conditions.orValue([]).exists(e, e.type == 'Issuing' && e.status == 'True')"
failed: "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'False')"
current: "status.conditions.filter(e, e.type == 'Ready').all(e, e.observedGeneration == metadata.generation && e.status == 'True')"
"#,
    )];
    let certificate = |conditions: Value| {
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
               "metadata": {"name": "tls", "generation": 3}, "status": {"conditions": conditions}})
    };
    let state = |conditions| assess(&checks, &certificate(conditions)).unwrap().state;
    assert_eq!(
        state(json!([{"type": "Ready", "status": "True", "observedGeneration": 3}])),
        HealthState::Current
    );
    assert_eq!(
        state(json!([{"type": "Ready", "status": "False", "observedGeneration": 3}])),
        HealthState::Failed
    );
    assert_eq!(
        state(json!([{"type": "Issuing", "status": "True"},
                     {"type": "Ready", "status": "True", "observedGeneration": 3}])),
        HealthState::InProgress
    );
    // `has()` on a status not written yet: an empty map, not an error.
    let guarded = [check(
        "{apiVersion: v1, kind: ConfigMap, current: \"has(status.ready) && status.ready\"}",
    )];
    let health = assess(
        &guarded,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
    )
    .unwrap();
    assert_eq!(health.state, HealthState::InProgress);
    assert!(
        health.message.contains("not true yet"),
        "{}",
        health.message
    );
}

#[test]
fn integers_compare_as_ints_and_strings_extensions_are_there() {
    let checks = [check(
        r#"
apiVersion: example.com/v1
kind: Widget
current: "self.status.replicas == 3 && self.status.phase.lowerAscii().startsWith('run')"
"#,
    )];
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                        "status": {"replicas": 3, "phase": "Running"}});
    assert_eq!(
        assess(&checks, &widget).unwrap().state,
        HealthState::Current
    );
}

#[test]
fn a_stale_observed_generation_is_in_progress_without_evaluating() {
    let mut object = application(Some("Healthy"));
    object["status"]["observedGeneration"] = json!(1);
    let health = assess(&[application_check()], &object).unwrap();
    assert_eq!(health.state, HealthState::InProgress);
    assert!(health.message.contains("observe generation 2"));
}

#[test]
fn checks_match_by_api_version_kind_name_and_selector() {
    let checks = [
        check(
            r#"
apiVersion: example.com/v1
kind: Widget
name: special
current: "false"
"#,
        ),
        check(
            r#"
apiVersion: example.com/v1
kind: Widget
selector: {matchLabels: {tier: db}}
current: "true"
"#,
        ),
    ];
    let widget = |name: &str, labels: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": name, "labels": labels}})
    };
    let compiled = compile(&checks).unwrap();
    // The first match wins: the named one.
    let special = compiled
        .assess(&widget("special", json!({"tier": "db"})))
        .unwrap();
    assert_eq!(special.state, HealthState::InProgress);
    assert!(special.message.starts_with("healthChecks[0]"));
    let db = compiled
        .assess(&widget("db-1", json!({"tier": "db"})))
        .unwrap();
    assert_eq!(db.state, HealthState::Current);
    assert!(db.message.starts_with("healthChecks[1]"));
    // No match: the built-in rules apply.
    assert!(compiled
        .assess(&widget("web", json!({"tier": "web"})))
        .is_none());
    assert!(compiled
        .assess(&json!({"apiVersion": "example.com/v2", "kind": "Widget", "metadata": {"name": "special"}}))
        .is_none());
}

#[test]
fn an_expression_that_does_not_compile_is_refused_naming_the_check_and_field() {
    let checks = [
        application_check(),
        check(
            r#"
apiVersion: example.com/v1
kind: Widget
current: "self.status.phase == "
failed: "self.status.(("
"#,
        ),
    ];
    let errors = compile(&checks).unwrap_err();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0].check, "healthChecks[1] (example.com/v1 Widget)");
    assert!(
        errors[0]
            .message
            .starts_with("expression failed does not compile"),
        "{}",
        errors[0].message
    );
    assert!(errors[1]
        .message
        .starts_with("expression current does not compile"));
    assert!(!errors[0].to_string().contains('\n'));
}

#[test]
fn http_probes_are_not_cel_checks() {
    let probe = check("{httpGet: {url: 'http://127.0.0.1:1/healthz'}}");
    assert!(compile(&[probe]).unwrap().is_empty());
}

/// The `healthChecks` example of the health-checks guide (the YAML block after `<!-- example: health-checks -->`).
fn readme_example() -> Vec<HealthCheck> {
    let readme = include_str!("../../../docs/guides/health-checks.md");
    let (_, after) = readme
        .split_once("<!-- example: health-checks -->\n```yaml\n")
        .expect("the health-checks guide has its example");
    let (block, _) = after.split_once("\n```").unwrap();
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Example {
        health_checks: Vec<HealthCheck>,
    }
    serde_saphyr::from_str::<Example>(block)
        .unwrap()
        .health_checks
}

#[test]
fn the_readme_example_compiles_and_judges_as_documented() {
    let checks = readme_example();
    assert_eq!(checks.len(), 4);
    let compiled = compile(&checks).unwrap();
    let state = |object: &Value| compiled.assess(object).map(|h| h.state);
    assert_eq!(
        state(&application(Some("Healthy"))),
        Some(HealthState::Current)
    );
    assert_eq!(
        state(&application(Some("Degraded"))),
        Some(HealthState::Failed)
    );
    let database = |labels: Value, phase: &str| {
        json!({"apiVersion": "example.com/v1", "kind": "Database",
               "metadata": {"name": "db", "labels": labels}, "status": {"phase": phase}})
    };
    assert_eq!(
        state(&database(json!({"tier": "primary"}), "Failed")),
        Some(HealthState::Failed)
    );
    // The selector leaves replicas to the built-in rules.
    assert_eq!(state(&database(json!({"tier": "replica"}), "Failed")), None);
    let certificate = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": "tls", "generation": 1},
        "status": {"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}]}});
    assert_eq!(state(&certificate), Some(HealthState::Current));
}

#[test]
fn messages_name_types_and_never_what_the_object_holds() {
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                        "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="}});
    for (current, expected) in [
        ("self.data", "current gave a map, not a bool (self.data)"),
        ("self.data.password", "current gave a string, not a bool"),
        (
            "self.data.password > 1",
            "could not be evaluated on this object",
        ),
        (
            "self.data[self.data.user] == 'x'",
            "no such key (a key read from the object)",
        ),
        (
            "int(self.data.password) > 0",
            "could not be evaluated on this object",
        ),
    ] {
        let checks = [check(&format!(
            "{{apiVersion: v1, kind: Secret, current: {current:?}}}"
        ))];
        let health = assess(&checks, &secret).unwrap();
        assert_eq!(health.state, HealthState::InProgress, "{current}");
        assert!(
            health.message.contains(expected),
            "{current}: {}",
            health.message
        );
        let shown = health.message.replace(current, "");
        for value in ["aHVudGVyMg==", "YWRtaW4=", "hunter2", "admin"] {
            assert!(!shown.contains(value), "{current}: {}", health.message);
        }
    }
}

#[test]
fn an_expression_over_budget_on_an_object_fails_it_and_is_not_evaluated_again() {
    let checks = compile(&[check(
        "{apiVersion: v1, kind: ConfigMap, current: \"self.data.a.replace('', self.data.a).size() > 0\"}",
    )])
    .unwrap();
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
                     "data": {"a": "x".repeat(100_000)}});
    let small = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "small"},
                       "data": {"a": "x"}});
    assert_eq!(checks.assess(&small).unwrap().state, HealthState::Current);
    let health = checks.assess(&big).unwrap();
    assert_eq!(health.state, HealthState::Failed);
    assert!(
        health.message.contains("CEL string limit")
            && health.message.contains("not evaluated again"),
        "{}",
        health.message
    );
    // Remembered for every object until the spec changes.
    assert_eq!(checks.assess(&small).unwrap().state, HealthState::Failed);
    assert!(checks.refusal().is_some());
}

#[test]
fn the_checks_of_a_pass_share_one_cost_budget() {
    let checks = compile(&[check(
        "{apiVersion: v1, kind: ConfigMap, current: \"self.data.all(k, self.data.all(j, k != j || j == k))\"}",
    )])
    .unwrap();
    let data: serde_json::Map<String, Value> =
        (0..200).map(|i| (format!("k{i}"), json!("v"))).collect();
    let object =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data});
    let pass = checks.for_pass();
    let states: Vec<HealthState> = (0..40)
        .map(|_| pass.assess(&object).unwrap().state)
        .collect();
    assert_eq!(states.first(), Some(&HealthState::Current));
    assert_eq!(states.last(), Some(&HealthState::Failed));
    assert!(
        pass.refusal().unwrap().contains("per pass"),
        "{:?}",
        pass.refusal()
    );
}

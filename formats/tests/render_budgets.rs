//! Each budget of the helm engine refuses hostile content with an error naming the budget, the
//! value and the template or file, before the process runs out of stack, memory or time.

use std::path::Path;
use std::time::{Duration, Instant};

use pallet_formats::{render, Format, RenderBudgets, RenderConfig, RenderError};

/// Writes a chart with `templates/cm.yaml` holding `template` and values.yaml holding `values`.
fn chart(dir: &Path, template: &str, values: &str) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: hostile\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(dir.join("values.yaml"), values).unwrap();
    std::fs::write(dir.join("templates/cm.yaml"), template).unwrap();
}

fn config(budgets: RenderBudgets) -> RenderConfig {
    let mut config = RenderConfig {
        install_namespace: "apps".into(),
        budgets,
        ..Default::default()
    };
    config.helm.release_name = "hostile".into();
    config
}

/// Renders the chart with `budgets`; the budget error, which must come within seconds.
fn refused_with(template: &str, values: &str, budgets: RenderBudgets) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path(), template, values);
    let start = Instant::now();
    let result = render(Format::Helm, dir.path(), &config(budgets));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "refused only after {:?}",
        start.elapsed()
    );
    match result {
        Err(error @ RenderError::BudgetExceeded { .. }) => {
            assert_eq!(error.category(), "RenderBudgetExceeded");
            let RenderError::BudgetExceeded { breach, message } = &error else {
                unreachable!()
            };
            (breach.budget.to_string(), message.clone())
        }
        other => panic!("not a budget error: {other:?}"),
    }
}

fn refused(template: &str, values: &str) -> (String, String) {
    refused_with(template, values, RenderBudgets::default())
}

const CONFIG_MAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n";

#[test]
fn a_self_recursive_tpl_is_refused_at_the_call_depth() {
    let (budget, message) = refused(
        &format!("{CONFIG_MAP}  a: {{{{ tpl .Values.x . }}}}\n"),
        "x: \"{{ tpl .Values.x . }}\"\n",
    );
    assert!(budget.starts_with("template call depth"), "{budget}");
    assert!(message.contains("hostile/templates/cm.yaml"), "{message}");
    assert!(message.contains("65"), "{message}");
}

#[test]
fn a_self_recursive_include_is_refused_at_the_call_depth() {
    let (budget, message) = refused(
        &format!("{{{{ define \"loop\" }}}}{{{{ include \"loop\" . }}}}{{{{ end }}}}{CONFIG_MAP}  a: {{{{ include \"loop\" . }}}}\n"),
        "",
    );
    assert!(budget.starts_with("template call depth"), "{budget}");
    assert!(message.contains("calling loop"), "{message}");
}

#[test]
fn deeply_nested_parentheses_are_refused_by_the_parser() {
    let (budget, message) = refused(
        &format!(
            "{CONFIG_MAP}  a: {{{{ {}1{} }}}}\n",
            "(".repeat(2000),
            ")".repeat(2000)
        ),
        "",
    );
    assert_eq!(budget, "template nesting depth");
    assert!(message.contains("hostile/templates/cm.yaml"), "{message}");
    assert!(message.contains("parentheses"), "{message}");
}

#[test]
fn deeply_nested_ifs_are_refused_by_the_parser() {
    let (budget, message) = refused(
        &format!(
            "{CONFIG_MAP}{}  a: b\n{}",
            "{{ if true }}".repeat(1000),
            "{{ end }}".repeat(1000)
        ),
        "",
    );
    assert_eq!(budget, "template nesting depth");
    assert!(message.contains("hostile/templates/cm.yaml"), "{message}");
    assert!(message.contains("if, with, range"), "{message}");
}

#[test]
fn nesting_within_the_budget_renders() {
    let dir = tempfile::tempdir().unwrap();
    chart(
        dir.path(),
        &format!(
            "{CONFIG_MAP}{}  a: {{{{ {}1{} }}}}\n{}",
            "{{ if true }}".repeat(40),
            "(".repeat(40),
            ")".repeat(40),
            "{{ end }}".repeat(40)
        ),
        "",
    );
    let rendered = render(Format::Helm, dir.path(), &config(RenderBudgets::default())).unwrap();
    assert_eq!(rendered.objects.len(), 1);
}

#[test]
fn deeply_nested_values_are_refused_naming_the_file() {
    let block: String = (0..100)
        .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
        .collect();
    let (budget, message) = refused(
        &format!("{CONFIG_MAP}  a: b\n"),
        &format!("{block}  x: 1\n"),
    );
    assert_eq!(budget, "values nesting depth");
    assert!(message.contains("values.yaml"), "{message}");
    let flow = format!("x: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let (budget, message) = refused(&format!("{CONFIG_MAP}  a: b\n"), &flow);
    assert_eq!(budget, "values nesting depth");
    assert!(message.contains("values.yaml"), "{message}");
}

#[test]
fn a_huge_repeat_is_refused_before_it_allocates() {
    let (budget, message) = refused(
        &format!("{CONFIG_MAP}  a: {{{{ repeat 3000000000 \"x\" | len }}}}\n"),
        "",
    );
    assert_eq!(budget, "string size (bytes)");
    assert!(message.contains("repeat 3000000000"), "{message}");
    assert!(message.contains("hostile/templates/cm.yaml"), "{message}");
}

#[test]
fn huge_lists_from_until_until_step_and_seq_are_refused() {
    for call in [
        "until 3000000000",
        "untilStep 0 3000000000 1",
        "seq 3000000000",
    ] {
        let (budget, message) = refused(&format!("{CONFIG_MAP}  a: {{{{ {call} | len }}}}\n"), "");
        assert_eq!(budget, "list size (items)", "{call}");
        assert!(message.contains(call), "{message}");
    }
}

#[test]
fn huge_random_strings_and_indents_are_refused() {
    for call in ["randAlphaNum 3000000000", "indent 3000000000 \"x\""] {
        let (budget, message) = refused(&format!("{CONFIG_MAP}  a: {{{{ {call} | len }}}}\n"), "");
        assert_eq!(budget, "string size (bytes)", "{call}");
        let head = call.split(' ').next().unwrap();
        assert!(message.contains(head), "{message}");
    }
}

#[test]
fn nested_loops_that_would_run_for_hours_run_out_of_steps() {
    let (budget, message) = refused(
        &format!(
            "{CONFIG_MAP}{{{{ range until 100000 }}}}{{{{ range until 100000 }}}}{{{{ end }}}}{{{{ end }}}}  a: b\n"
        ),
        "",
    );
    assert!(budget.starts_with("render steps"), "{budget}");
    assert!(message.contains("hostile/templates/cm.yaml"), "{message}");
    assert!(message.contains("limit of 1000000"), "{message}");
    // Ranging over a huge integer is refused before the loop's items are built.
    let (budget, _) = refused(
        &format!("{CONFIG_MAP}{{{{ range 3000000000 }}}}{{{{ end }}}}  a: b\n"),
        "",
    );
    assert!(budget.starts_with("render steps"), "{budget}");
}

#[test]
fn output_past_the_budget_is_refused_as_it_is_written() {
    let budgets = RenderBudgets {
        output_bytes: 1 << 20,
        ..Default::default()
    };
    let (budget, message) = refused_with(
        &format!("{CONFIG_MAP}  a: |\n{{{{- range until 100000 }}}}\n    0123456789012345678901234567890123456789{{{{ end }}}}\n"),
        "",
        budgets,
    );
    assert_eq!(budget, "rendered output (bytes)");
    assert!(message.contains("hostile/templates/cm.yaml"), "{message}");
    assert!(message.contains("1048576"), "{message}");
    // The same output from an include is refused as a string past the budget.
    let (budget, message) = refused_with(
        &format!("{{{{ define \"big\" }}}}{{{{ range until 100000 }}}}0123456789012345678901234567890123456789{{{{ end }}}}{{{{ end }}}}{CONFIG_MAP}  a: {{{{ include \"big\" . | len }}}}\n"),
        "",
        budgets,
    );
    assert_eq!(budget, "string size (bytes)");
    assert!(message.contains("include \"big\""), "{message}");
}

#[test]
fn the_step_budget_is_the_operators_to_set() {
    let template = format!("{CONFIG_MAP}{{{{ range until 1000 }}}}{{{{ end }}}}  a: b\n");
    let (budget, message) = refused_with(
        &template,
        "",
        RenderBudgets {
            steps: 500,
            ..Default::default()
        },
    );
    assert!(budget.starts_with("render steps"), "{budget}");
    assert!(message.contains("limit of 500"), "{message}");
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path(), &template, "");
    assert!(render(Format::Helm, dir.path(), &config(RenderBudgets::default())).is_ok());
}

#[path = "corpus/mod.rs"]
mod corpus;

/// Every chart of the real-world corpus, with its values file, renders within the default
/// budgets; the steps and output each takes are printed (what the defaults are measured
/// against).
#[test]
fn real_world_charts_fit_the_default_budgets() {
    let root = corpus::corpus();
    let scratch = tempfile::tempdir().unwrap();
    let mut charts: Vec<String> = std::fs::read_dir(root.join("charts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    charts.sort();
    let mut most = (0, String::new());
    for chart in charts {
        let dir = corpus::chart_dir(&root, &chart, scratch.path());
        let values_file = root.join("values").join(format!("{chart}.yaml"));
        let mut config = config(RenderBudgets::default());
        config.helm.release_name = "rel".into();
        config.helm.capabilities = Some(pallet_formats::HelmCapabilities {
            kube_version: "v1.35.4".into(),
            ..pallet_formats::HelmCapabilities::default_for_template()
        });
        if let Ok(text) = std::fs::read_to_string(&values_file) {
            config.helm.values = serde_saphyr::from_str(&text).unwrap();
        }
        let rendered = render(Format::Helm, &dir, &config)
            .unwrap_or_else(|e| panic!("{chart} does not render within the budgets: {e}"));
        let steps = pallet_formats::budget::steps_used();
        let bytes: usize = rendered
            .objects
            .iter()
            .map(|o| serde_json::to_vec(o.object.body()).unwrap().len())
            .sum();
        println!(
            "{chart}: {steps} steps, {} objects, {bytes} bytes as JSON",
            rendered.objects.len()
        );
        if steps > most.0 {
            most = (steps, chart);
        }
    }
    println!("most steps: {} ({})", most.0, most.1);
    assert!(
        most.0 * 20 < pallet_formats::budget::DEFAULT_STEPS,
        "{most:?}"
    );
}

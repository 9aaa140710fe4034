use super::*;
use serde_json::json;

fn rendered(objects: &[Value]) -> Rendered {
    let objects = objects
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let origin = Origin {
                file: "a.yaml".into(),
                document: i,
                line: 1,
            };
            Object::new(v.clone(), origin).unwrap()
        })
        .collect();
    crate::plain::finish(objects, "ns").unwrap()
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "app"}, "spec": {"replicas": "${N:=1}"}})
}

fn config_map() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "c", "annotations": {"pallet.dev/substitute": "Disabled"}},
           "data": {"k": "${N}"}})
}

struct Answer(Result<String, String>, Vec<Value>);

impl FunctionRunner for Answer {
    fn call(&mut self, _index: usize, request: &Value) -> Result<String, String> {
        self.1.push(request.clone());
        self.0.clone()
    }
}

fn substitute(n: &str) -> NamedProcessor {
    NamedProcessor {
        name: "vars".into(),
        processor: Processor::Substitute(Substitution {
            vars: [("N".to_string(), n.to_string())].into(),
            strict: true,
        }),
    }
}

fn function() -> NamedProcessor {
    NamedProcessor {
        name: "fn".into(),
        processor: Processor::Function {
            config: Some(json!({"team": "a"})),
        },
    }
}

#[test]
fn processors_run_in_order_and_say_what_they_changed() {
    let annotated = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "app", "namespace": "ns", "annotations": {"team": "a"}},
        "spec": {"replicas": 3}});
    let answer = json!({"apiVersion": krm::API_VERSION, "kind": "ResourceList",
        "items": [annotated, config_map()],
        "results": [{"message": "set team", "severity": "info"}]});
    let mut runner = Answer(Ok(answer.to_string()), Vec::new());
    let (out, traces) = run(
        rendered(&[deployment(), config_map()]),
        &[substitute("3"), function()],
        None,
        &mut runner,
    )
    .unwrap();
    // The function saw the substituted objects and its config as a ConfigMap.
    let request = &runner.1[0];
    assert_eq!(request["items"][0]["spec"]["replicas"], json!(3));
    assert_eq!(request["items"][1]["data"]["k"], json!("${N}"), "exempt");
    assert_eq!(request["functionConfig"]["data"]["team"], json!("a"));
    assert_eq!(
        out.objects[0].object.body()["metadata"]["annotations"]["team"],
        json!("a")
    );
    // The ConfigMap came back without a namespace: the install namespace is given again.
    assert_eq!(out.objects[1].object.namespace(), Some("ns"));
    assert_eq!(traces[0].changed, vec!["Deployment.apps ns/app"]);
    assert_eq!(traces[1].changed, vec!["Deployment.apps ns/app"]);
    assert_eq!(traces[1].notes, vec!["set team"]);
}

#[test]
fn a_function_error_fails_the_render_with_its_message() {
    let answer = json!({"kind": "ResourceList", "items": [],
        "results": [{"message": "replicas must be odd", "severity": "error"}]});
    let mut runner = Answer(Ok(answer.to_string()), Vec::new());
    let err = run(rendered(&[deployment()]), &[function()], None, &mut runner).unwrap_err();
    assert_eq!(err.category(), "FunctionFailed");
    assert!(
        err.to_string()
            .contains("processor fn: replicas must be odd"),
        "{err}"
    );
    let mut down = Answer(Err("connection refused".into()), Vec::new());
    let err = run(rendered(&[deployment()]), &[function()], None, &mut down).unwrap_err();
    assert_eq!(err.category(), "FunctionUnavailable");
}

#[test]
fn substitution_errors_name_the_processor_object_and_field() {
    let strict = NamedProcessor {
        name: "vars".into(),
        processor: Processor::Substitute(Substitution {
            vars: Default::default(),
            strict: true,
        }),
    };
    let object = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"x": "${MISSING}"}});
    let err = run(rendered(&[object]), &[strict], None, &mut NoFunctions("")).unwrap_err();
    assert_eq!(err.category(), "SubstitutionFailed");
    assert_eq!(
        err.to_string(),
        "processor vars: Service ns/s: /spec/x: variable MISSING is not defined and has no default (strict)"
    );
}

#[test]
fn a_pipeline_goes_on_from_its_progress_elsewhere() {
    let processors = [substitute("3"), function(), substitute("4")];
    let mut first = Pipeline::new(rendered(&[deployment()]), &processors, None);
    let Step::Function { index, request } = first.advance().unwrap() else {
        panic!("no function step")
    };
    assert_eq!(index, 1);
    // The progress crosses a process boundary as JSON.
    let progress: Progress =
        serde_json::from_str(&serde_json::to_string(&first.progress()).unwrap()).unwrap();
    let mut second = Pipeline::from_progress(progress, &processors, None).unwrap();
    let mut items = request["items"].as_array().unwrap().clone();
    items[0]["metadata"]["labels"] = json!({"from": "function"});
    let answer = json!({"kind": "ResourceList", "items": items}).to_string();
    second.resume(Ok(answer)).unwrap();
    assert_eq!(second.advance().unwrap(), Step::Done);
    let (out, traces) = second.finish().unwrap();
    let body = out.objects[0].object.body();
    assert_eq!(
        body["spec"]["replicas"],
        json!(3),
        "the first substitution stays"
    );
    assert_eq!(body["metadata"]["labels"]["from"], json!("function"));
    let names: Vec<&str> = traces.iter().map(|t| t.processor.as_str()).collect();
    assert_eq!(names, ["vars", "fn", "vars"]);
    assert_eq!(traces[1].changed, vec!["Deployment.apps ns/app"]);
    assert!(traces[2].changed.is_empty(), "nothing left to substitute");
}

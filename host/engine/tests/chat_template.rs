//! Chat templates rendered by [`ChatTemplate`] against Hugging Face
//! transformers' own renderer (`tests/reference/chat_ref.py`), run at test
//! time: SmolLM2's template from the real GGUF and the fixture templates in
//! `tests/reference/templates/`, over conversations with every role, empty
//! turns, non-ASCII and markup characters, with and without the generation
//! prompt. Where transformers raises, we must fail too, and a template's own
//! `raise_exception` must reach us with the same message.

mod chat_support;

use std::path::{Path, PathBuf};

use chat_support::{repo_root, require_model, require_python, run_reference, scratch_dir};
use pagoda_core::gguf::Gguf;
use pagoda_engine::chat::{ChatMessage, ChatTemplate, ChatTemplateError};
use serde_json::{json, Value};

type Rendered = Result<String, ChatTemplateError>;

fn msg(role: &str, content: &str) -> ChatMessage {
    ChatMessage::new(role, content)
}

fn conversations() -> Vec<(&'static str, Vec<ChatMessage>)> {
    vec![
        ("one user turn", vec![msg("user", "Hello!")]),
        (
            "system, alternating turns",
            vec![
                msg("system", "You are terse."),
                msg("user", "What is 2+2?"),
                msg("assistant", "4"),
                msg("user", "And 3+3?"),
            ],
        ),
        ("empty contents", vec![msg("user", ""), msg("assistant", "")]),
        (
            "non-ASCII and markup",
            vec![
                msg("system", "Réponds en français 🇫🇷 \u{1F600}"),
                msg("user", "<b>Tom & Jerry</b> said \"hi\" and 'bye'\n\tnew line, then {{ braces }} & \\ backslash"),
                msg("assistant", "ünïcødé — 日本語 ✓ <|im_end|>"),
                msg("user", "  padded, spaced   text?  \n"),
            ],
        ),
        (
            "roles that do not alternate",
            vec![msg("user", "first"), msg("user", "second")],
        ),
        ("system only", vec![msg("system", "Only a system prompt.")]),
        ("an unknown role", vec![msg("user", "q"), msg("tool", "{\"x\": 1}")]),
    ]
}

/// A template under test: its source here, and how Python gets it.
struct Subject {
    name: String,
    source: String,
    python_source: Value,
    bos: String,
    eos: String,
}

fn fixtures() -> Vec<Subject> {
    let dir = repo_root().join("tests/reference/templates");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 6,
        "fixture templates missing in {}",
        dir.display()
    );
    paths
        .into_iter()
        .map(|p| {
            let source = std::fs::read_to_string(&p).unwrap();
            Subject {
                name: p.file_name().unwrap().to_string_lossy().into_owned(),
                python_source: json!({ "template": source }),
                source,
                bos: "<s>".into(),
                eos: "</s>".into(),
            }
        })
        .collect()
}

/// SmolLM2's template, with its BOS/EOS texts from the vocabulary; Python
/// reads the template from the same file with the gguf package.
fn smollm2(model: &Path) -> Subject {
    let bytes = std::fs::read(model).unwrap();
    let gguf = Gguf::parse(&bytes).unwrap();
    let tokens = gguf.get_str_array("tokenizer.ggml.tokens").unwrap();
    let token = |key: &str| {
        let id = gguf.get_u32(key).unwrap() as usize;
        String::from_utf8(tokens.iter().nth(id).unwrap().to_vec()).unwrap()
    };
    let (bos, eos) = (
        token("tokenizer.ggml.bos_token_id"),
        token("tokenizer.ggml.eos_token_id"),
    );
    Subject {
        name: "SmolLM2 (GGUF)".into(),
        source: gguf.get_str("tokenizer.chat_template").unwrap().to_string(),
        python_source: json!({ "template_gguf": model }),
        bos,
        eos,
    }
}

/// Templates that transformers fails to compile or that raise on any input.
fn broken() -> Vec<Subject> {
    let plain = |name: &str, source: &str| Subject {
        name: name.into(),
        source: source.into(),
        python_source: json!({ "template": source }),
        bos: "<s>".into(),
        eos: "</s>".into(),
    };
    vec![
        plain("unclosed for", "{% for m in messages %}{{ m.content }}"),
        plain("bad expression", "line one\n{{ messages[ }}"),
        plain(
            "raises with tokens",
            "{{ raise_exception('refused: ' + bos_token + ' & <x>') }}",
        ),
    ]
}

/// Renders `cases` with transformers (the Python reference).
fn reference(python: &Path, name: &str, cases: &[Value]) -> Vec<Value> {
    let dir = scratch_dir(name);
    let (input, output) = (dir.join("cases.json"), dir.join("rendered.json"));
    std::fs::write(&input, serde_json::to_vec(cases).unwrap()).unwrap();
    run_reference(python, "chat_ref.py", &[&input, &output]);
    let theirs: Vec<Value> = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    assert_eq!(theirs.len(), cases.len());
    theirs
}

/// Tallies of a comparison.
#[derive(Default)]
struct Tally {
    same_text: usize,
    both_failed: usize,
    mismatches: Vec<String>,
}

impl Tally {
    /// Our render against transformers' for one case: the same text, or
    /// both failing; a template's own exception must carry the same message
    /// on both sides, and a syntax error the same line.
    fn compare(&mut self, label: &str, ours: &Rendered, theirs: &Value) {
        let text = theirs.get("ok").and_then(Value::as_str);
        let error = theirs.get("error").and_then(Value::as_str);
        match (ours, text, error) {
            (Ok(a), Some(b), _) if a == b => self.same_text += 1,
            (Ok(a), Some(b), _) => {
                self.mismatch(format!("{label}:\n  ours:   {a:?}\n  theirs: {b:?}"))
            }
            (Err(e), None, Some(err)) => match (e, err.strip_prefix("TemplateError: ")) {
                (ChatTemplateError::Raised(a), Some(b)) if a == b => self.both_failed += 1,
                (ChatTemplateError::Raised(_), _) | (_, Some(_)) => {
                    self.mismatch(format!("{label}: ours {e}, transformers {err}"))
                }
                (ChatTemplateError::Syntax { line, .. }, None) => {
                    let want = theirs
                        .get("line")
                        .and_then(Value::as_u64)
                        .map(|l| l as usize);
                    if *line == want {
                        self.both_failed += 1
                    } else {
                        self.mismatch(format!(
                            "{label}: ours {e}, transformers {err} at line {want:?}"
                        ))
                    }
                }
                _ => self.both_failed += 1,
            },
            (Ok(a), None, Some(err)) => self.mismatch(format!(
                "{label}: ours rendered {a:?}, transformers failed: {err}"
            )),
            (Err(e), Some(b), _) => self.mismatch(format!(
                "{label}: ours failed ({e}), transformers rendered {b:?}"
            )),
            (_, None, None) => panic!("{label}: malformed reference output {theirs}"),
        }
    }

    fn mismatch(&mut self, what: String) {
        self.mismatches.push(what);
    }

    fn assert_clean(&self, what: &str) {
        eprintln!(
            "{what}: {} identical, {} failed on both sides, {} mismatched",
            self.same_text,
            self.both_failed,
            self.mismatches.len()
        );
        assert!(
            self.mismatches.is_empty(),
            "{} mismatches:\n{}",
            self.mismatches.len(),
            self.mismatches.join("\n")
        );
    }
}

#[test]
fn templates_render_like_transformers() {
    let test = "templates_render_like_transformers";
    let Some(python) = require_python(test) else {
        return;
    };
    let mut subjects = fixtures();
    subjects.extend(broken());
    if let Some(model) = require_model(test) {
        subjects.push(smollm2(&model));
    }
    let convs = conversations();

    let (mut cases, mut labels, mut ours) = (Vec::new(), Vec::new(), Vec::new());
    for s in &subjects {
        let compiled = ChatTemplate::new(&s.source, &s.bos, &s.eos);
        for (conv_name, messages) in &convs {
            for agp in [false, true] {
                let mut case = s.python_source.clone();
                case["bos_token"] = json!(s.bos);
                case["eos_token"] = json!(s.eos);
                // As (role, content) pairs: a JSON object here would reach
                // Python with its keys sorted, and key order shows in tojson.
                let pairs: Vec<[&str; 2]> = messages
                    .iter()
                    .map(|m| [m.role.as_str(), m.content.as_str()])
                    .collect();
                case["messages"] = json!(pairs);
                case["add_generation_prompt"] = json!(agp);
                cases.push(case);
                labels.push(format!(
                    "{} / {conv_name} / add_generation_prompt={agp}",
                    s.name
                ));
                ours.push(match &compiled {
                    Ok(t) => t.render(messages, agp),
                    Err(ChatTemplateError::Syntax { line, message }) => {
                        Err(ChatTemplateError::Syntax {
                            line: *line,
                            message: message.clone(),
                        })
                    }
                    Err(e) => panic!("{}: {e}", s.name),
                });
            }
        }
    }

    let theirs = reference(&python, "chat_template_ref", &cases);
    let mut tally = Tally::default();
    for ((label, ours), theirs) in labels.iter().zip(&ours).zip(&theirs) {
        tally.compare(label, ours, theirs);
    }
    tally.assert_clean(&format!(
        "{} cases over {} templates",
        ours.len(),
        subjects.len()
    ));
    assert!(
        tally.same_text > tally.both_failed,
        "most cases must render"
    );
}

/// OpenAI-style messages as JSON objects (tool calls, names, null content,
/// reasoning under its several names) and a tools list, through
/// [`ChatTemplate::render_with`].
#[test]
fn json_messages_and_tools_render_like_transformers() {
    let Some(python) = require_python("json_messages_and_tools_render_like_transformers") else {
        return;
    };
    let source =
        std::fs::read_to_string(repo_root().join("tests/reference/templates/tools_calls.jinja"))
            .unwrap();
    let template = ChatTemplate::new(&source, "<s>", "</s>").unwrap();
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Météo à <ville> & \"région\"",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "add", "parameters": {"a": 1.5, "b": -2, "big": 1e21}}}
    ]);
    let messages = vec![
        json!({"role": "system", "content": "Use tools."}),
        json!({"role": "user", "content": "Weather in Zürich?", "name": "ana"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}
        ]}),
        json!({"role": "tool", "content": "{\"temp\": 21.5}", "tool_call_id": "call_1"}),
        json!({"role": "assistant", "content": "21.5 °C"}),
        json!({"role": "user", "content": "And tomorrow?"}),
        json!({"role": "assistant", "reasoning": "Pas de <données> & \"rien\"", "content": "Unknown."}),
        json!({"role": "user", "content": "Sure?"}),
        json!({"role": "assistant", "thinking": "t1", "reasoning_content": null, "content": "Yes."}),
    ];
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for tools in [None, Some(&tools)] {
        for agp in [false, true] {
            cases.push(json!({
                "template": source, "bos_token": "<s>", "eos_token": "</s>",
                "messages": messages, "tools": tools, "add_generation_prompt": agp,
            }));
            ours.push(template.render_with(&messages, tools, agp));
        }
    }
    let theirs = reference(&python, "chat_json_ref", &cases);
    let mut tally = Tally::default();
    for (i, (ours, theirs)) in ours.iter().zip(&theirs).enumerate() {
        tally.compare(&format!("tools case {i}"), ours, theirs);
    }
    tally.assert_clean("JSON messages");
    assert_eq!(tally.same_text, cases.len());
}

/// Hostile templates end with a typed error instead of running forever,
/// overflowing the stack or filling memory.
#[test]
fn hostile_templates_are_stopped() {
    let messages = [msg("user", "hi")];
    let render = |source: &str| {
        let started = std::time::Instant::now();
        let result = ChatTemplate::new(source, "", "")
            .unwrap()
            .render(&messages, true);
        (result, started.elapsed())
    };
    let (r, took) =
        render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
    assert!(matches!(r, Err(ChatTemplateError::OutOfFuel)), "{r:?}");
    eprintln!("a 10^10-iteration loop stopped after {took:?}");
    let (r, _) = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    assert!(matches!(r, Err(ChatTemplateError::Render { .. })), "{r:?}");
    // Output is bounded by the fuel (minijinja charges per byte) and the cap.
    let too_much = |r: &Result<String, ChatTemplateError>| {
        matches!(
            r,
            Err(ChatTemplateError::OutOfFuel | ChatTemplateError::OutputTooLarge { .. })
        )
    };
    let (r, _) = render("{% for i in range(1000) %}{{ 'x' * 100000 }}{% endfor %}");
    assert!(too_much(&r), "{r:?}");
    // A value that shares itself prints exponentially long. (Not covered:
    // `ns.x ~ ''`, minijinja's own concatenation, which is exponential in
    // time before any output; Jinja on Python hangs there too.)
    let doubling = "{% set ns = namespace(x=[]) %}{% for i in range(40) %}\
                    {% set ns.x = [ns.x, ns.x] %}{% endfor %}";
    for print in ["{{ ns.x }}", "{{ ns.x | tojson }}", "{{ ns.x | string }}"] {
        let (r, _) = render(&format!("{doubling}{print}"));
        assert!(too_much(&r), "{print}: {r:?}");
    }
    // A value nested 200,000 deep is dropped without overflowing the stack.
    let (r, _) = render(
        "{% set ns = namespace(x=[]) %}{% for j in range(200) %}{% for i in range(1000) %}\
         {% set ns.x = [ns.x] %}{% endfor %}{% endfor %}built",
    );
    assert_eq!(r.unwrap(), "built");
    // Deep nesting in the source is refused by the parser, not the stack.
    let deep = format!("{{{{ {}1{} }}}}", "[".repeat(100_000), "]".repeat(100_000));
    let r = ChatTemplate::new(&deep, "", "");
    assert!(matches!(r, Err(ChatTemplateError::Syntax { .. })), "{r:?}");
    let deep = format!(
        "{}x{}",
        "{% if true %}".repeat(10_000),
        "{% endif %}".repeat(10_000)
    );
    let r = ChatTemplate::new(&deep, "", "");
    assert!(matches!(r, Err(ChatTemplateError::Syntax { .. })), "{r:?}");
}

/// `tokenizer.chat_template` from a GGUF: SmolLM2's renders, a file without
/// one gives `None`, one of the wrong type a typed error.
#[test]
fn template_from_gguf() {
    // A GGUF v3 header with no tensors and the given metadata.
    fn gguf_with(kv: &[u8], count: u64) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(count.to_le_bytes());
        b.extend(kv);
        b
    }
    let empty = gguf_with(&[], 0);
    let gguf = Gguf::parse(&empty).unwrap();
    assert!(ChatTemplate::from_gguf(&gguf, "", "").unwrap().is_none());

    let key = b"tokenizer.chat_template";
    let mut kv = (key.len() as u64).to_le_bytes().to_vec();
    kv.extend(key);
    kv.extend(4u32.to_le_bytes()); // u32
    kv.extend(7u32.to_le_bytes());
    let wrong = gguf_with(&kv, 1);
    let gguf = Gguf::parse(&wrong).unwrap();
    assert!(matches!(
        ChatTemplate::from_gguf(&gguf, "", ""),
        Err(ChatTemplateError::Gguf(_))
    ));

    let Some(model) = require_model("template_from_gguf") else {
        return;
    };
    let bytes = std::fs::read(model).unwrap();
    let gguf = Gguf::parse(&bytes).unwrap();
    let template = ChatTemplate::from_gguf(&gguf, "<|im_start|>", "<|im_end|>")
        .unwrap()
        .unwrap();
    let prompt = template.render(&[msg("user", "Hi")], true).unwrap();
    // The ChatML layout SmolLM2's model card documents.
    assert!(
        prompt.ends_with("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
        "{prompt:?}"
    );
}

/// The fuel that stops hostile templates leaves real ones room: every
/// fixture renders a 1,000-turn conversation of 1 MB of text.
#[test]
fn long_conversations_fit_the_budget() {
    let turn = "Lorem ipsum dolor sit amet, é 日本 <tag> & more. ".repeat(20);
    let messages: Vec<ChatMessage> = (0..1000)
        .map(|i| msg(if i % 2 == 0 { "user" } else { "assistant" }, &turn))
        .collect();
    for s in fixtures() {
        let template = ChatTemplate::new(&s.source, &s.bos, &s.eos).unwrap();
        let started = std::time::Instant::now();
        let prompt = template.render(&messages, true);
        let prompt = prompt.unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert!(
            prompt.len() > messages.len() * turn.trim().len(),
            "{}",
            s.name
        );
        eprintln!(
            "{}: {} bytes in {:?}",
            s.name,
            prompt.len(),
            started.elapsed()
        );
    }
}

/// Servers share one template across request threads.
#[test]
fn template_is_shareable() {
    fn shareable<T: Send + Sync>() {}
    shareable::<ChatTemplate>();
    shareable::<pagoda_engine::chat::StopStrings>();
    shareable::<ChatTemplateError>();
}

/// A request's `chat_template_kwargs` reach the template as variables
/// (Qwen3's `enable_thinking`), and cannot replace the ones the renderer
/// sets.
#[test]
fn template_kwargs_are_variables_that_cannot_replace_the_renderers() {
    let source = "{% for m in messages %}{{ m.content }}{% endfor %}\
                  {% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}";
    let t = ChatTemplate::new(source, "<s>", "</s>").unwrap();
    let messages = [msg("user", "Hi")];
    let kwargs = |v: Value| v.as_object().cloned().unwrap();
    let off = kwargs(json!({"enable_thinking": false, "messages": []}));
    let on = kwargs(json!({"enable_thinking": true}));
    let render = |k: Option<&serde_json::Map<String, Value>>| {
        t.render_with_kwargs(&messages, None, false, k).unwrap()
    };
    assert_eq!(render(None), "Hi");
    assert_eq!(render(Some(&on)), "Hi");
    assert_eq!(render(Some(&off)), "Hi<think></think>");
}

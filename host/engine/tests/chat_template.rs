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

    let mut cases = Vec::new();
    let mut labels = Vec::new();
    let mut ours = Vec::new();
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
                    Err(e) => Err(ChatTemplateError::Syntax {
                        line: None,
                        message: e.to_string(),
                    }),
                });
            }
        }
    }

    let dir = scratch_dir("chat_template_ref");
    let (input, output) = (dir.join("cases.json"), dir.join("rendered.json"));
    std::fs::write(&input, serde_json::to_vec(&cases).unwrap()).unwrap();
    run_reference(&python, "chat_ref.py", &[&input, &output]);
    let theirs: Vec<Value> = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    assert_eq!(theirs.len(), ours.len());

    let (mut same_text, mut both_failed, mut mismatches) = (0, 0, Vec::new());
    for ((label, ours), theirs) in labels.iter().zip(&ours).zip(&theirs) {
        match (
            ours,
            theirs.get("ok").and_then(Value::as_str),
            theirs.get("error").and_then(Value::as_str),
        ) {
            (Ok(a), Some(b), _) if a == b => same_text += 1,
            (Ok(a), Some(b), _) => {
                mismatches.push(format!("{label}:\n  ours:   {a:?}\n  theirs: {b:?}"))
            }
            (Err(e), None, Some(err)) => {
                // A template's own exception carries its message unchanged.
                match (e, err.strip_prefix("TemplateError: ")) {
                    (ChatTemplateError::Raised(a), Some(b)) if a == b => both_failed += 1,
                    (ChatTemplateError::Raised(_), _) | (_, Some(_)) => {
                        mismatches.push(format!("{label}: ours {e}, transformers {err}"))
                    }
                    _ => both_failed += 1,
                }
            }
            (Ok(a), None, Some(err)) => mismatches.push(format!(
                "{label}: ours rendered {a:?}, transformers failed: {err}"
            )),
            (Err(e), Some(b), _) => mismatches.push(format!(
                "{label}: ours failed ({e}), transformers rendered {b:?}"
            )),
            (_, None, None) => panic!("{label}: malformed reference output {theirs}"),
        }
    }
    eprintln!(
        "{} cases over {} templates: {same_text} identical, {both_failed} failed on both sides, {} mismatched",
        ours.len(),
        subjects.len(),
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(same_text > both_failed, "most cases must render");
}

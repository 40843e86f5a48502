"""A tiny model that writes ThreadWeaver's fork/join grammar, for the fork/join executor's real paths.

No small public model writes ``<Outlines>`` blocks, so one is trained here as ThreadWeaver trains
its reasoners, in miniature: a tiny Llama (SmolLM2's tokenizer and chat template) learns the
context -> completion pairs the executor meets for one question: the trunk up to
``</Outlines>``, each ``<Thread>`` from the shared prefix, and the trunk after the join. A few
hundred steps on the CPU make it recite them, so greedy decoding follows the grammar and what a
test checks is the executor's own work. :func:`write_gguf` writes it for llama.cpp's server.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paragen.prompts import solve_messages
from paragen.types import Problem
from strategies._fork_grammar import THREADWEAVER

PROBLEM = Problem(id="weave", question="What is 21 + 32?", gold="53")
TRUNK = (
    "Split by place value.\n<Parallel>\n<Outlines>\n<Outline>1: the tens</Outline>\n"
    "<Outline>2: the ones</Outline>\n</Outlines>"
)
CHILDREN = {"1": " 20 + 30 = 50.", "2": " 1 + 2 = 3."}
JOINED = THREADWEAVER.join(list(CHILDREN.items()))
ENDING = "</Parallel>\nSo the sum is \\boxed{53}."
WOVEN = TRUNK + JOINED + ENDING  # the whole reply the executor must assemble


def prompt_ids(tokenizer: Any, reply: str | None) -> list[int]:
    """The question's prompt as paragen's engine renders and tokenizes it (EngineBackend.prompt_ids):
    the generation prompt, or ``reply`` prefilled and continued."""
    messages = [m.model_dump() for m in solve_messages(PROBLEM.question)]
    if reply is not None:
        messages.append({"role": "assistant", "content": reply})
    continued = reply is not None
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=not continued, continue_final_message=continued
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def lessons(tokenizer: Any) -> list[tuple[list[int], list[int]]]:
    """(context, completion) token pairs: what the executor will ask, and the answer to learn."""

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    pairs = [(prompt_ids(tokenizer, None), ids(TRUNK))]
    for label, text in CHILDREN.items():
        head = TRUNK + THREADWEAVER.child_start(label)
        pairs.append((prompt_ids(tokenizer, head), ids(text + THREADWEAVER.child_stop)))
    pairs.append((prompt_ids(tokenizer, TRUNK + JOINED), [*ids(ENDING), tokenizer.eos_token_id]))
    return pairs


def teacher(tokenizer_dir: Path) -> Callable[[Any], None]:
    """An ``init`` for the tiny_model fixture: trains the model until it recites its lessons, every
    token at a probability above 0.95, so greedy decoding repeats them on any CPU."""
    torch: Any = importlib.import_module("torch")
    tokenizer = importlib.import_module("transformers").AutoTokenizer.from_pretrained(tokenizer_dir)
    batch = [(torch.tensor([context + answer]), len(answer)) for context, answer in lessons(tokenizer)]

    def token_losses(model: Any, ids: Any, size: int) -> Any:
        logits = model(ids, logits_to_keep=size + 1).logits[0, :-1]
        return torch.nn.functional.cross_entropy(logits, ids[0, -size:], reduction="none")

    def train(model: Any) -> None:
        _widened(torch, model)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(300):
            losses = [token_losses(model, ids, size) for ids, size in batch]
            if max(float(loss.detach().max()) for loss in losses) < 0.05:
                return
            optimizer.zero_grad()
            sum(loss.mean() for loss in losses).backward()
            optimizer.step()
        raise AssertionError("the tiny model did not learn its lessons in 300 steps")

    return train


def _widened(torch: Any, model: Any) -> None:
    """Weights wider than transformers' init: with its small ones the attention starts out uniform
    over the prompt's hundred tokens and finds the child's label (two tokens back) only after a long
    plateau; wider, a few dozen steps do it."""
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.normal_(1.0, 0.3)
            else:
                param.normal_(0.0, 0.1 * (64 / param.shape[-1]) ** 0.5)


def write_gguf(model_dir: Path, like: Path, out: Path) -> Path:
    """``model_dir`` (a Llama checkpoint) as a float32 GGUF for llama.cpp, its tokenizer and chat
    template copied from ``like`` (a GGUF of the same tokenizer: SmolLM2's)."""
    gguf: Any = importlib.import_module("gguf")
    transformers: Any = importlib.import_module("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = model.config
    writer = gguf.GGUFWriter(str(out), "llama")
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    writer.add_rope_dimension_count(cfg.hidden_size // heads)
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for field in gguf.GGUFReader(str(like)).fields.values():
        if field.name.startswith("tokenizer."):
            kind = field.types[0]
            sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for name, tensor in _gguf_tensors(model.state_dict(), heads, kv_heads):
        writer.add_tensor(name, tensor.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


_LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_TOP_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}


def _gguf_tensors(state: dict[str, Any], heads: int, kv_heads: int) -> list[tuple[str, Any]]:
    """llama.cpp's names, with q and k rows reordered for its rotary layout (pairs, not halves)."""
    out = []
    for key, tensor in state.items():
        stem = key.removesuffix(".weight")
        if stem in _TOP_NAMES:
            out.append((f"{_TOP_NAMES[stem]}.weight", tensor))
            continue
        _, _, layer, part = stem.split(".", 3)
        if part in ("self_attn.q_proj", "self_attn.k_proj"):
            tensor = _pairs(tensor, heads if part.endswith("q_proj") else kv_heads)
        out.append((f"blk.{layer}.{_LAYER_NAMES[part]}.weight", tensor))
    return out


def _pairs(weight: Any, heads: int) -> Any:
    rows, rest = weight.shape[0], weight.shape[1:]
    return weight.reshape(heads, 2, rows // heads // 2, *rest).transpose(1, 2).reshape(weight.shape)

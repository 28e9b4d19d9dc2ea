"""References for embeddings and rerank: run on the GPU machine (torch, transformers 5.17 and
sentence-transformers there), from the repository root: OUT=dir python3 tests/data/embed/make_goldens.py

Writes $OUT/embed.tar.gz holding:
- qwen3_embed-a/: a tiny random Qwen3-Embedding-shaped checkpoint as sentence-transformers saves one
  (Qwen3Model weights without the "model." prefix, modules.json, 1_Pooling/config.json with last-token
  pooling, 2_Normalize, config_sentence_transformers.json with Qwen3-Embedding's query prompt), and
  embed_golden.json: each input's token ids (the tokenizer appends <|endoftext|>, as Qwen3-Embedding's
  does) and its embedding from SentenceTransformer.encode in float32, one input at a time (no padding),
  also truncated to 8 dimensions and renormalized (Matryoshka `dimensions`).
  Its tokenizer.json is models/qwen3-tiny-a's with that post-processor; it is left out of the archive
  (11 MB) and written by the tests (see README.md).
- rerank_golden.json: Qwen3-Reranker's scoring (its model card's prompt and yes/no rule) over
  models/qwen3-tiny-a, a Qwen3ForCausalLM as the rerankers are.
- pooled_golden.json: models/qwen3-tiny-a used as an embedder with mean and last-token pooling
  of the final-norm hidden states, L2-normalized.
Every reference is computed in float32 over the stored bf16 weights upcast, eager attention.
"""
import json
import os
import shutil
import tarfile

import torch
import transformers
import sentence_transformers
from sentence_transformers import SentenceTransformer, models

OUT = os.environ.get("OUT", "/tmp/out")
TINY = os.path.join(os.getcwd(), "models", "qwen3-tiny-a")
WORK = os.path.join(OUT, "work")
EOS_POST = {
    "type": "TemplateProcessing",
    "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
             {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
    "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643], "tokens": ["<|endoftext|>"]}},
}
QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
LONG = ("Once upon a time, in a land far away, there lived a curious engineer who "
        "measured everything twice. ") * 30
TEXTS = ["The quick brown fox", "hello", "What is the capital of China?",
         "The capital of China is Beijing.", LONG]


def perturb_norms(model, seed):
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.add_(0.15 * torch.randn(p.shape, generator=g))


def embedder():
    d = os.path.join(WORK, "qwen3_embed-a")
    raw = os.path.join(WORK, "raw")
    torch.manual_seed(4321)
    cfg = transformers.Qwen3Config(vocab_size=151936, hidden_size=16, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                                   tie_word_embeddings=True, initializer_range=0.08, max_position_embeddings=32768)
    base = transformers.Qwen3Model(cfg)
    perturb_norms(base, 4321)
    base = base.to(torch.bfloat16)
    base.save_pretrained(raw, safe_serialization=True)
    tok = json.load(open(os.path.join(TINY, "tokenizer.json")))
    tok["post_processor"] = EOS_POST
    json.dump(tok, open(os.path.join(raw, "tokenizer.json"), "w"), ensure_ascii=False)
    tc = json.load(open(os.path.join(TINY, "tokenizer_config.json")))
    tc["padding_side"] = "left"
    # An embedder tokenizes plain text (sentence-transformers 6 would otherwise wrap it in the chat template).
    tc.pop("chat_template", None)
    json.dump(tc, open(os.path.join(raw, "tokenizer_config.json"), "w"), indent=1, ensure_ascii=False)
    tr = models.Transformer(raw, max_seq_length=32768)
    pool = models.Pooling(tr.get_word_embedding_dimension(), pooling_mode="lasttoken")
    st = SentenceTransformer(modules=[tr, pool, models.Normalize()],
                             prompts={"query": QUERY_PROMPT, "document": ""}, default_prompt_name=None)
    st.save(d)
    # The released Qwen3-Embedding config.json names Qwen3ForCausalLM over Qwen3Model's weights.
    c = json.load(open(os.path.join(d, "config.json")))
    print("saved config architectures:", c.get("architectures"), "dtype:", c.get("dtype", c.get("torch_dtype")))
    c["architectures"] = ["Qwen3ForCausalLM"]
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)

    ref = SentenceTransformer(d, device="cpu", model_kwargs={"dtype": torch.float32, "attn_implementation": "eager"})
    print("reference dtype:", next(ref.parameters()).dtype)
    golden = {"model": "qwen3_embed-a", "compute": "float32, sentence-transformers %s, transformers %s, one input at a time"
              % (sentence_transformers.__version__, transformers.__version__), "query_prompt": QUERY_PROMPT, "inputs": []}
    for prompt_name in (None, "query"):
        for text in TEXTS:
            full = (QUERY_PROMPT if prompt_name else "") + text
            ids = ref.tokenize([full])["input_ids"][0].tolist()
            e = ref.encode([text], prompt_name=prompt_name, convert_to_tensor=True, batch_size=1)[0]
            e8 = ref.encode([text], prompt_name=prompt_name, convert_to_tensor=True, batch_size=1, truncate_dim=8,
                            normalize_embeddings=True)[0]
            golden["inputs"].append({"text": text, "prompt_name": prompt_name, "token_ids": ids,
                                     "embedding": e.tolist(), "embedding_dims8": e8.tolist()})
            print(f"  embed {prompt_name} {len(ids)} ids, |e| {float(e.norm()):.6f}", flush=True)
    json.dump(golden, open(os.path.join(d, "embed_golden.json"), "w"), indent=1)
    os.remove(os.path.join(d, "tokenizer.json"))
    if os.path.exists(os.path.join(d, "chat_template.jinja")):
        raise RuntimeError("the embedder kept a chat template")


def reranker():
    tok = transformers.AutoTokenizer.from_pretrained(TINY)
    model = transformers.AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32, attn_implementation="eager").eval()
    prefix = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
              "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
    suffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    default_instruction = "Given a web search query, retrieve relevant passages that answer the query"
    no_id, yes_id = tok.convert_tokens_to_ids("no"), tok.convert_tokens_to_ids("yes")
    pre = tok.encode(prefix, add_special_tokens=False)
    suf = tok.encode(suffix, add_special_tokens=False)
    cases = [(None, "What is the capital of China?", "The capital of China is Beijing."),
             (None, "What is the capital of China?", "Gravity is a force that attracts two bodies towards each other."),
             ("Given a question, find the answer", "Explain gravity", "The quick brown fox"),
             (None, "hello", LONG)]
    out = {"model": "qwen3-tiny-a", "compute": "float32, transformers %s, eager" % transformers.__version__,
           "prefix": prefix, "suffix": suffix, "default_instruction": default_instruction,
           "yes_token_id": yes_id, "no_token_id": no_id, "pairs": []}
    with torch.no_grad():
        for instruction, query, doc in cases:
            body = "<Instruct>: {}\n<Query>: {}\n<Document>: {}".format(instruction or default_instruction, query, doc)
            ids = pre + tok.encode(body, add_special_tokens=False) + suf
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            pair = torch.stack([logits[no_id], logits[yes_id]])
            score = float(torch.nn.functional.log_softmax(pair, dim=0)[1].exp())
            out["pairs"].append({"instruction": instruction, "query": query, "document": doc, "token_ids": ids,
                                 "no_logit": float(logits[no_id]), "yes_logit": float(logits[yes_id]), "score": score})
            print(f"  rerank {len(ids)} ids: score {score:.6f}", flush=True)
    json.dump(out, open(os.path.join(WORK, "rerank_golden.json"), "w"), indent=1)


def pooled():
    tok = transformers.AutoTokenizer.from_pretrained(TINY)
    model = transformers.AutoModel.from_pretrained(TINY, dtype=torch.float32, attn_implementation="eager").eval()
    out = {"model": "qwen3-tiny-a", "compute": "float32, transformers %s, eager; final-norm hidden states" % transformers.__version__,
           "inputs": []}
    with torch.no_grad():
        for text in TEXTS:
            ids = tok.encode(text, add_special_tokens=False)
            h = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
            mean = torch.nn.functional.normalize(h.mean(0), dim=0)
            last = torch.nn.functional.normalize(h[-1], dim=0)
            out["inputs"].append({"text": text, "token_ids": ids, "mean": mean.tolist(), "last": last.tolist()})
    json.dump(out, open(os.path.join(WORK, "pooled_golden.json"), "w"), indent=1)


def main():
    print("transformers", transformers.__version__, "sentence-transformers", sentence_transformers.__version__,
          "torch", torch.__version__, flush=True)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    embedder()
    reranker()
    pooled()
    with tarfile.open(os.path.join(OUT, "embed.tar.gz"), "w:gz") as t:
        for name in ("qwen3_embed-a", "rerank_golden.json", "pooled_golden.json"):
            t.add(os.path.join(WORK, name), arcname=name)
    shutil.rmtree(WORK)
    print("wrote", os.path.join(OUT, "embed.tar.gz"), os.path.getsize(os.path.join(OUT, "embed.tar.gz")))


if __name__ == "__main__":
    main()

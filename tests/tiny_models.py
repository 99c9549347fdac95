"""Transformers' configs at toy widths, for the model benchmarks' CPU tests (tests/test_model_bench.py and the
distributed benchmark's CPU ranks, tests/distributed_bench_cpu.py): the shapes of each model's config (GQA, MoE,
Qwen2's biased q/k/v and tied head) with everything small enough to run on a CPU in seconds."""

TINY = {
    "llama": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                  rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, rms_norm_eps=1e-5,
                  max_position_embeddings=256, tie_word_embeddings=False),
    "mixtral": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                    vocab_size=512, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=256,
                    tie_word_embeddings=False),
}
for _qwen in ("qwen2-0.5b", "qwen2-1.5b"):   # Qwen2's shape of config (biased q/k/v, tied head) at toy widths
    TINY[_qwen] = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                       vocab_size=512, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                       rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=True)

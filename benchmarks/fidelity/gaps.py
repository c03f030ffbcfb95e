"""What the model lacks for the rows it misses: each a hypothesis about the mechanism (or the missing fact
of the workload) behind a miss, printed beside any row outside +-30%. A name here explains a miss; it never
changes a modeled number."""

from __future__ import annotations

import re

GAPS = (
    (r"^catlass-a2-empty-kernel", "a lone kernel's start-up on every core (the cold_start estimate)"),
    (r"^pypto-fused-recurrent-kda", "a measured per-task cost of PyPTO's AI CPU scheduler: the model hands out the "
     "subgraph tasks (512 in the first version, 128 once merged) one every mpmd_task, an estimate that the one PyPTO "
     "training row (a matmul of 48 long tasks) bounds only from above; and the first version's four subgraphs pass the "
     "recurrence's intermediates through GM (the guide's GM 落地), which the model does not price"),
    (r"^sfa-a3-", "the two kernels' own pipelines: Ascend C overlaps gather, Cube and softmax across 512-token blocks "
     "on one core, TileLang's example gathers all 2048 rows again on each of 8 cores and runs its stages in turn; the "
     "sparse_attention rule prices one pipelined gather for both (indexed_access_cycles an estimate)"),
    (r"^kimi-k2-thinking", "decode steps the model prices below the tutorial's: up to 8 sequences replay a FULL "
     "decode graph (vLLM's default FULL_AND_PIECEWISE, kept since vLLM-Ascend's MLA supports UNIFORM_BATCH graphs; the "
     "attention the host rebinds after each replay is modeled and hides under a 0.4 ms device layer), 31 ms at one "
     "sequence and 35 at eight (vLLM-Ascend's own layer, vllm_mla.py) where the tutorial's concurrency sweep measures "
     "57.7 and 87; xLLM PR #2199 puts "
     "vLLM-Ascend's DeepSeek-V3.2 at TP16, batch 1, MTP1 at 26 ms TPOT (a ~50 ms step on a path that rebinds "
     "nothing), so the rebind is not it. Unmodeled candidates: the serving loop's host work outside the graph "
     "(scheduling, input preparation, eager logits and sampling, the pre-replay stream synchronize), the latency "
     "of the five TP16/EP16 collectives a MoE layer runs, and the W4A16 grouped matmul's group-32 dequantisation "
     "(the 30 ms growth from 1 to 8 sequences); the eager steps are host-bound: 3023 ops a decode "
     "step and 3624 a prompt, each paying the host_us path"),
    (r"^dsr1-a2-int8-pdhybrid", "prefills that cost more than the model's: played through, the burst of 32 prompts "
     "per die gives TTFT 2.3 / 14.8 s against 8.4 / 31.6 s published, so the prefills the decode steps wait for "
     "are about 3x the modeled prefill of one prompt (omni-infer's PD-hybrid prefill path is not modeled)"),
    (r"^catlass-mm-910b2-2048x4096x80000", "the cost of a row copy from HBM: the 80000-deep row-major A's stride "
     "passes ND2NZ's 16-bit srcDValue (CATLASS STRIDE_LIMIT 65536 elements), so CopyGmToL1 copies it row by row, "
     "each copy paying row_copy_cycles (166 cycles, msKPP's profiled GM->L1 DataCopy, whose curves are L2 hits); "
     "an A this large comes partly from HBM, whose longer latency a copy that waits for its own row pays"),
    (r"^catlass-mm-910b2-.*-basic$", "the basic kernel's row-major (ND) tile loads beyond the 512-byte misalignment "
     "the model prices (K = 4000: 8000-byte rows): 445 us against 1231 us at twice the K and M"),
    (r"^catlass-mm-20aic-20x6144x16384-zn", "a measured share of HBM peak: the NZ weight (201 MB) streams at the HBM "
     "cap, where the 32x320 tiles' 140 us (about 124 us past start-up) is 92% of peak; these two rows are the only "
     "kernel rows HBM caps, so a fit without them sets efficiency.memory by the steps alone (0.6 in the k-fold)"),
    (r"^catlass-mm-20aic-20x6144x16384-nd", "the 32x320 tile's 640-byte row bursts of the row-major B (not 512-byte "
     "aligned), which the model does not price: B's layout is not known to the cost rule"),
    (r"^catlass-", "a lone kernel's start-up and head (cold_start 12 us, fit; kernel_head 2 us) beside a few us of "
     "Cube work: CATLASS's one-tile 910B3 rows take 18 us for under 3 us of work, and the tuning guide calls its "
     "times for reference only"),
    (r"^seed003-moe-mask-zeros-scatter", "the token count and top-k (the page gives neither; 16k tokens, top-8 of 64 "
     "assumed), the CANN version, and how its 0.08 ms splits over the kernels. What the page's code runs is known: an "
     "eager ZerosLike of the bf16 mask, then aclnnInplaceScatterValue, which on A2/A3 broadcasts 1.0 to the index shape "
     "(BroadcastTo), linearises the int64 index to int32 (LinearIndex) and scatters on AI Core (ScatterElementsV2: bf16 "
     "is in its AI Core list and a 64-wide last axis fits one UB load; hicann/ops-nn index/scatter_elements_v2/op_host/"
     "op_api/aclnn_scatter.cpp and scatter_elements.cpp @b3ed056e), so AI CPU is not why it takes 80 us. The model "
     "prices ZerosLike and one ScatterElements, launch-bound, 29 us; the four kernels with ZerosLike and the scatter_ "
     "call each starting on an idle stream model at about 51 us (-36%); each kernel on an idle stream would need the "
     "scatter_ call's three kernels launched apart, which one aclnn call does not do"),
    (r"^seed003-", "a measured AI CPU rate for int64 Cast/ReduceSum, and the seed's shapes (not given; 16k tokens, "
     "top-8 of 64 assumed): the int64 Cast of the one-hot mask on AI CPU is most of the modeled time"),
    (r"^dsv3-a3-task-wait", "a per-task gap that fits both this row and the training steps: the modeled wait is the "
     "layer's tasks times task_gap (1.33 us, fit); the blog's 18 us over its 20+ operators a layer is about 0.9 us a "
     "task, and omni-infer's own layer (no MlaProlog) launches 27"),
    (r"^glm52-", "npugraph_ex's own kernel choices and the KV offload's host traffic in the offload configs"),
    (r"^dsv4flash-a3-hc-post", "a measured fixed cost of a small Vector kernel: each of the five eager kernels and "
     "the fused one pays kernel_head and cold_start (about 16 us a kernel in the model, where the README's 30 us over "
     "five kernels is 6 us each and its fused kernel 7.5 us), so the modeled speedup is about the kernel count"),
    (r"^dsv4flash-", "DeepSeek-V4's compressed sparse attention (CSA/HCA) and mHC, approximated by DSA-style MLA"),
    (r"^omni-dsv3-", "the vendor's batch and deployment (not given; Omni-Infer's 50 sequences per die on 64 dies "
     "assumed)"),
    (r"^qwen3-8b-.*-prefill", "one eager prefill of a 38-token prompt, measured once per configuration, is "
     "torch_npu's host path op by op (fitted estimates shared with the Kimi-K2 and Step-3.7 eager steps; "
     "docs/fidelity.md, vLLM-Ascend's Kimi-K2 layer: with its list all-gather's per-rank copies one set of host "
     "costs brings both stacks within 30%, but for the W8A8 TP1 prefill, +49% at the refit)"),
    (r"^dsv32exp-|^glm5-|^dsr1-a3", "expert load imbalance and the MTP draft's sampling path"),
    (r"^ptoisa-fia-", "how fused attention splits one head over the cores: the fused_attention rule spreads a call's "
     "flops over every core, so a one-head call of 2048 queries against 8192 keys (8.6 GFLOP, 24 us at the Cube peak) "
     "stays under the eager host path (75 us), where the measured 127 us is device-bound at about a fifth of the peak"),
    (r"^tilelang-fa-bench-", "a measured share of the Cube peak for long non-causal fused attention: the model runs "
     "the 32K and 64K GQA calls at the fused_attention rule's rate, about 70% of the bf16 peak, where AscendC's "
     "FlashAttentionScore reaches about 48% (candidates: the online softmax's Vector work, one KV head read by 12 query heads)"),
)


def gap_of(row_id: str) -> str:
    """The first named gap whose pattern matches the row id ("" when none does)."""
    return next((text for pattern, text in GAPS if re.search(pattern, row_id)), "")

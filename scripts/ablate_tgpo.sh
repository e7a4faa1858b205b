#!/usr/bin/env bash
# TGPO ablations on a finished pipeline run (BUILD_NOTES.md, "The learning result"): for each variant, rebuild the
# dataset from the run's round-1 episodes (same tokenizer, prompt style and budget as the pipeline), train TGPO from
# the run's SFT model, and evaluate it in the browser exactly as the pipeline evaluated its models.
#   bash scripts/ablate_tgpo.sh runs/large runs/ablate alpha5:--alpha=5 sum:--q_aggregate=sum \
#        norm:+--config.data.weight_norm=dataset_mean
# A variant is name:flags; flags starting with '+' go to launch.train, the others to launch.build_dataset.
set -euo pipefail
RUN=$1; OUT=$2; shift 2
PY=${PY:-.venv/bin/python}
CFG=$(cat "$RUN/pipeline_config.json")
get() { "$PY" -c "import json,sys; c=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, {'c': c}))" "$CFG" "$1"; }
PROMPT=$(get 'c["prompt_tokens"]'); STYLE=$(get 'c["prompt_style"]'); TASKS=$(get 'c["tasks"]["num_test"]')
FAMS=$(get '",".join(c["tasks"]["families"])'); SEEDS=$(get '",".join(map(str, c["eval"]["seeds"]))')
TEMP=$(get 'c["eval"]["temperature"]'); STEPS=$(get 'c["eval"]["max_steps"]'); TOK=$(get 'c["eval"]["max_tokens"]')
LR=$(get 'c["tgpo"]["optim"]["learning_rate"]'); WARM=$(get 'c["tgpo"]["optim"]["warmup_fraction"]')
for variant in "$@"; do
  name=${variant%%:*}; flags=${variant#*:}
  build=(); train=()
  for f in $flags; do if [[ $f == +* ]]; then train+=("${f#+}"); else build+=("$f"); fi; done
  d="$OUT/$name"
  echo "== $name: build ${build[*]:-(defaults)} train ${train[*]:-(defaults)}"
  [ -f "$d/data/manifest.json" ] || "$PY" -m launch.build_dataset --episodes="$RUN/episodes/round1" --out="$d/data" \
      --tokenizer="$RUN/tokenizer" --prompt_style="$STYLE" --prompt_budget_tokens="$PROMPT" --num_shards=2 \
      "${build[@]}" > /dev/null
  "$PY" -m launch.train --config=configs/tgpo.py:scratch-small --config.model.path="$RUN/models/sft" \
      --config.data.train_dir="$d/data" --config.data.max_prompt_len="$PROMPT" --config.train.output_dir="$d/run" \
      --config.optim.learning_rate="$LR" --config.optim.warmup_fraction="$WARM" --config.train.save_every=200 \
      "${train[@]}" > /dev/null
  "$PY" -m launch.evaluate --model="$d/run" --families="$FAMS" --num_tasks="$TASKS" --seeds="$SEEDS" \
      --temperature="$TEMP" --max_steps="$STEPS" --max_tokens="$TOK" --prompt_style="$STYLE" \
      --prompt_tokens="$PROMPT" --out="$d/eval" > /dev/null
  "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], json.dumps(r['mean']), json.dumps({k: v and v['half_width'] for k, v in r['ci95'].items()}))" "$d/eval/eval.json" "$name"
done

#!/usr/bin/env bash
# Image folders end to end (docs/user-guide.md, "Image data"): a CIFAR-10-format binary archive of
# generated images (fake_cifar10.py; nothing is downloaded) is converted by
# tools/data/cifar10_to_images.py into train/ and test/ folders of PNGs; a small CNN on [3, 32, 32]
# trains from them with `dtrain-submit --local`, and `infer` on the test folder prints class names
# keyed by file path. per_channel normalisation with crops and flips trains too, and infer applies
# its statistics. `export` writes the data as packed files once; training streams them (same
# examples, names). A corrupt image fails the job naming the file, or is skipped and listed with
# `corrupt: skip`. Arguments: dtrain-submit, fake_cifar10.py, cifar10_to_images.py.
set -u
SUBMIT=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
FAKE=$2
CONVERT=$3
WORK="${TEST_TMPDIR:-$(mktemp -d)}/images"
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

python3 "$FAKE" "$WORK/bin" 200 300 || { echo "FAIL: fake_cifar10.py"; exit 1; }
python3 "$CONVERT" "$WORK/bin" --out "$WORK/cifar" > convert.out || { echo "FAIL: the converter: $(cat convert.out)"; exit 1; }
cd "$WORK" || exit 1
[[ $(find cifar/train -name '*.png' | wc -l) -eq 1000 && $(ls cifar/train | wc -l) -eq 10 ]] ||
  fail "the converter wrote $(find cifar/train -name '*.png' | wc -l) training images in $(ls cifar/train | wc -l) folders"

cat > job.yaml <<'YAML'
name: cifar-small
model:
  input: [3, 32, 32]
  layers:
    - convolution: {filters: 8, kernel: 3, stride: 2, padding: same}
    - batch_norm: {activation: relu}
    - convolution: {filters: 16, kernel: 3, stride: 2, padding: same}
    - batch_norm: {activation: relu}
    - global_pooling: {type: max}
    - output: {units: 10, activation: softmax, loss: mcxent}
  updater: {type: adam, learning_rate: 0.01}
data:
  train: {format: images, path: cifar/train}
  test: {format: images, path: cifar/test}
  normalize: scale
training: {epochs: 4, batch_size: 32}
output: {model: cifar-small.dtm}
YAML
timeout 120 "$SUBMIT" --local job.yaml > train.out 2>&1 || fail "training exited $?: $(tail -n 3 train.out)"
acc=$(sed -nE 's/^examples: 300  accuracy: ([0-9.]+).*/\1/p' train.out)
python3 -c "import sys; sys.exit(0 if ${acc:-0} >= 0.9 else 1)" || fail "test accuracy ${acc:-none} < 0.9"

timeout 60 "$SUBMIT" infer cifar-small.dtm --input cifar/test --output preds.csv 2> infer.err ||
  fail "infer exited $?: $(cat infer.err)"
python3 - preds.csv <<'PY' || fail "the predictions are not keyed and named as expected"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
assert rows[0] == ["key", "predicted"] + ["p_" + n for n in names], rows[0]
body = rows[1:]
assert len(body) == 300, len(body)
assert [r[0] for r in body] == sorted(r[0] for r in body), "keys not in path order"
right = sum(r[0].split("/")[0] == r[1] for r in body)
print(f"infer: {right}/300 predicted names match their folders")
assert right >= 270, right
PY

# eval on the folder tree, with ROC: an AUC per named class, the curves as CSV; a bad metric.
timeout 60 "$SUBMIT" eval cifar-small.dtm --data cifar/test --metrics classification,roc --roc-csv roc.csv > eval.out 2>&1 ||
  fail "eval --metrics classification,roc exited $?: $(tail -n 3 eval.out)"
grep -q "^examples: 300  accuracy:" eval.out && grep -qE "^truck +[01]\.[0-9]{6}$" eval.out ||
  fail "eval's report: $(head -n 3 eval.out) ... $(tail -n 3 eval.out)"
macro=$(sed -nE 's/^macro AUC: ([0-9.]+)/\1/p' eval.out)
python3 -c "import sys; sys.exit(0 if ${macro:-0} >= 0.95 else 1)" || fail "macro AUC ${macro:-none} < 0.95"
[[ $(head -n 1 roc.csv) == "class,threshold,fpr,tpr" && $(cut -d, -f1 roc.csv | sort -u | wc -l) -eq 11 ]] ||
  fail "roc.csv: $(head -n 2 roc.csv), classes $(cut -d, -f1 roc.csv | sort -u | wc -l)"
"$SUBMIT" eval cifar-small.dtm --data cifar/test --metrics accuracy > badmetric.out 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q "unknown metric 'accuracy'" badmetric.out || fail "--metrics accuracy: exit $rc, $(cat badmetric.out)"

# --batch-size: the same keys and predictions in batches of 7; 0 is refused.
timeout 60 "$SUBMIT" infer cifar-small.dtm --input cifar/test --output preds7.csv --batch-size 7 2> /dev/null ||
  fail "infer --batch-size 7 exited $?"
[[ $(cut -d, -f1,2 preds7.csv) == $(cut -d, -f1,2 preds.csv) ]] || fail "--batch-size 7 changed the predictions"
"$SUBMIT" infer cifar-small.dtm --input cifar/test --output x.csv --batch-size 0 > bs0.out 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q -- "--batch-size" bs0.out || fail "--batch-size 0: exit $rc, $(cat bs0.out)"

# Per-channel normalisation and augmentation (random crops within 2 pixels, flips): still
# learns, and its first epoch's training loss differs from the plain run's (the examples did
# change); infer applies the stored per-channel statistics.
sed -e 's/  normalize: scale/  normalize: per_channel\n  augment: {crop_padding: 2, horizontal_flip: true}/' \
    -e 's/cifar-small.dtm/cifar-aug.dtm/' job.yaml > aug.yaml
timeout 120 "$SUBMIT" --local aug.yaml > aug.out 2>&1 || fail "augmented training exited $?: $(tail -n 3 aug.out)"
aug_acc=$(sed -nE 's/^examples: 300  accuracy: ([0-9.]+).*/\1/p' aug.out)
python3 -c "import sys; sys.exit(0 if ${aug_acc:-0} >= 0.9 else 1)" || fail "augmented: test accuracy ${aug_acc:-none} < 0.9"
first_loss() { sed -nE 's/^epoch 1 done: train loss ([0-9.]+).*/\1/p' "$1"; }
[[ -n $(first_loss aug.out) && $(first_loss aug.out) != $(first_loss train.out) ]] ||
  fail "augmentation changed nothing: epoch 1 loss $(first_loss aug.out) vs $(first_loss train.out)"
timeout 60 "$SUBMIT" infer cifar-aug.dtm --input cifar/test --output aug.csv 2> aug_infer.err ||
  fail "infer (per_channel) exited $?: $(cat aug_infer.err)"
right=$(awk -F, 'NR > 1 { split($1, k, "/"); if (k[1] == $2) n++ } END { print n + 0 }' aug.csv)
[[ $right -ge 270 ]] || fail "infer with per_channel statistics: $right/300 right"

# Exported once into 3 packed files (8-bit), then trained from them, streamed.
timeout 60 "$SUBMIT" export job.yaml --out packed --files 3 > export.out 2>&1 || fail "export exited $?: $(cat export.out)"
[[ $(ls packed/train-*.dtb | wc -l) -eq 3 && -f packed/test-00000.dtb ]] || fail "export wrote: $(ls packed)"
grep -q "train: 1000 examples in 3 files (8-bit" export.out || fail "export said: $(head -n 1 export.out)"
sed -e 's|train: {format: images, path: cifar/train}|train: {format: packed, path: packed/train-*.dtb}|' \
    -e 's|test: {format: images, path: cifar/test}|test: {format: packed, path: packed/test-*.dtb}|' \
    -e 's/cifar-small.dtm/cifar-packed.dtm/' job.yaml > packed.yaml
timeout 120 "$SUBMIT" --local packed.yaml > packed.out 2>&1 || fail "training from packed files exited $?: $(tail -n 3 packed.out)"
grep -q "data: 1000 training examples, 300 test examples" packed.out || fail "$(grep '^data:' packed.out)"
packed_acc=$(sed -nE 's/^examples: 300  accuracy: ([0-9.]+).*/\1/p' packed.out)
python3 -c "import sys; sys.exit(0 if ${packed_acc:-0} >= 0.9 else 1)" || fail "from packed files: test accuracy ${packed_acc:-none} < 0.9"
timeout 60 "$SUBMIT" infer cifar-packed.dtm --input cifar/test --output packed.csv 2> /dev/null &&
  head -n 1 packed.csv | grep -q "p_airplane" || fail "a model trained from packed files has no class names"
sed 's/normalize: scale/normalize: per_channel/' packed.yaml > mismatch.yaml
timeout 60 "$SUBMIT" --local mismatch.yaml > mismatch.out 2>&1
rc=$?
[[ $rc -ne 0 ]] && grep -q "exported with normalize: scale, the spec says per_channel" mismatch.out ||
  fail "a normaliser other than the export's: exit $rc, $(head -n 2 mismatch.out)"

# A truncated PNG among the training images.
head -c 100 cifar/train/cat/00003.png > cifar/train/cat/broken.png
timeout 60 "$SUBMIT" --local job.yaml > corrupt.out 2>&1
rc=$?
[[ $rc -eq 1 ]] && grep -q "cifar/train/cat/broken.png" corrupt.out && grep -q "corrupt: skip" corrupt.out ||
  fail "a corrupt image: exit $rc (expected 1, the job failed), $(tail -n 2 corrupt.out)"
sed -i 's|train: {format: images, path: cifar/train}|train: {format: images, path: cifar/train, corrupt: skip}|' job.yaml
timeout 120 "$SUBMIT" --local job.yaml > skip.out 2>&1 || fail "corrupt: skip exited $?: $(tail -n 3 skip.out)"
grep -q "skipped a corrupt image (corrupt: skip): .*broken.png" skip.out ||
  fail "the skipped image is not listed: $(head -n 3 skip.out)"
grep -q "data: 1000 training examples" skip.out || fail "$(grep '^data:' skip.out)"

echo "image folder test: accuracy ${acc:-?} (augmented ${aug_acc:-?}, packed ${packed_acc:-?}), $failures failures"
[[ $failures -eq 0 ]]

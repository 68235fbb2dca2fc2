#!/usr/bin/env bash
export LD_LIBRARY_PATH=$PWD/.gpu/lib
B=$PWD/.gpu/bin O=/tmp/vo
mkdir -p $O
( timeout 120 $B/test_gdn_verify > $O/t_verify.txt 2>&1; echo "rc $?" >> $O/t_verify.txt ); tail -n 3 $O/t_verify.txt
for r in 1 2; do for v in before new; do
  K=$B/kvbuf; [ $v = before ] && K=$B/kvbuf_before && export KVBUF_COMMIT=0408d159af95
  [ $v = new ] && unset KVBUF_COMMIT
  $K sweep --model qwen3-next-80b-a3b --kernels verify-kvbuffer --batch 1,8,64,128,256,512 --drafts 4,5 --chunk 16 \
    --state-dtype fp32 --budget-s 0.06 --verify-out $O/v_${v}_$r.csv > $O/v_${v}_$r.log 2>&1
done; done
$B/kvbuf sweep --model qwen3-next-80b-a3b --kernels verify-kvbuffer --batch 128,256 --drafts 4,5 --chunk 16 --state-dtype bf16 --budget-s 0.06 --verify-out $O/v_new_bf16.csv > $O/b1.log 2>&1
KVBUF_COMMIT=0408d159af95 $B/kvbuf_before sweep --model qwen3-next-80b-a3b --kernels verify-kvbuffer --batch 128,256 --drafts 4,5 --chunk 16 --state-dtype bf16 --budget-s 0.06 --verify-out $O/v_before_bf16.csv > $O/b2.log 2>&1
cd $O && tar czf $OUT/v.tgz *.csv *.txt

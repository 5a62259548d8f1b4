r"""Unsupervised SimCSE, BERT-base: the paper's setting (Gao et al., 2021, run_unsup_example.sh).

1 epoch over wiki1m (1M sentences), batch 64, lr 3e-5 with linear decay to 0,
max_seq_len 32, temperature 0.05, dropout 0.1, seed 42; the [CLS] pooler with
an MLP used only in training (tested without it); STS-B dev evaluated every
125 steps and the best checkpoint kept.

Run:
  python -m jaxcse.train --config configs/base.py --workdir workdirs/simcse_bert_base

Needs ``$JAXCSE_DATA_DIR/corpora/wiki1m_for_simcse.txt`` and the SentEval data
under ``$JAXCSE_DATA_DIR/senteval/downstream``, and the ``bert-base-uncased``
weights (from the hub, or ``--config.model.name=/path/to/folder``).

Differences from the official run that do not change the math: float32 instead
of fp16 on CPU (set ``model.dtype="bfloat16"`` on GPU/TPU); batches are padded
to max_seq_len (masked, so the same numbers); the last partial batch of an
epoch is left out (fixed shapes); STS-B dev is also evaluated at the last step.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.method = "simcse"  # Training objective; "simcse" = InfoNCE over in-batch negatives.
  config.seed = 42  # Seeds the MLP head init, the data order and every dropout mask.

  config.model = ml_collections.ConfigDict()
  config.model.name = "bert-base-uncased"  # HF folder, hub id, or an offline-package name (see README).
  config.model.revision = ""  # For a hub id: the branch, tag or commit to load ("" = main); recorded in model/.
  config.model.init = (
    "pretrained"  # pretrained: model.name's weights; random: a fresh model.architecture (pretraining).
  )
  config.model.tokenizer = ""  # With init=random: the tokenizer folder (its vocabulary sets the embedding size).
  config.model.pooler = "cls"  # cls | cls_before_pooler | avg | avg_top2 | avg_first_last.
  config.model.mlp_only_train = True  # SimCSE unsup: train with the cls MLP, evaluate without it.
  config.model.test_pooler = ""  # Saved test-time pooler if not the dev-evaluation one ("" = the same).
  config.model.dev_pooler = ""  # Pooler of the evaluations during training if not SimCSE's choice ("" = that).
  config.model.dropout = 0.1  # Hidden and attention dropout; the source of SimCSE's positive pairs.
  # True draws the attention-dropout mask per element, as PyTorch's BERT (the official code). False (BERT, RoBERTa,
  # XLM-R) shares each layer's mask across the batch and the heads (flax's broadcast_dropout, as transformers' Flax
  # BERT did), so both views of a sentence get the same attention mask and differ only in hidden dropout: how
  # jaxcse trained before this default (a workdir whose config.json lacks the field was trained so), kept to
  # reproduce those runs; it costs unsupervised SimCSE about 1.6 STS points (docs/differences.md). ModernBERT
  # always draws per element.
  config.model.attention_dropout_per_element = True
  config.model.dtype = "float32"  # Computation dtype; params stay float32. bfloat16 on GPU/TPU.
  config.model.gradient_checkpointing = False  # Recompute layers in the backward pass to save memory.

  config.data = ml_collections.ConfigDict()
  config.data.data_dir = ""  # Data root; empty = $JAXCSE_DATA_DIR. Relative paths below resolve there.
  # .txt, .csv (sent0,sent1[,hard_neg]), tfds:NAME[:split]; pair data (docs/own_data.md): .jsonl, .parquet, a
  # Dataset.save_to_disk folder or hf:NAME[:CONFIG[:SPLIT]], columns in order anchor, positive, negatives.
  config.data.train = "corpora/wiki1m_for_simcse.txt"
  # How a .csv reads: simcse (a header sent0[,sent1[,hard_neg]] or text) or sentence_transformers (any names, in
  # order anchor, positive, negatives; a label/score column is the label), as for .jsonl.
  config.data.csv_format = "simcse"
  config.data.max_seq_len = 32  # Training sentences are cut to this many tokens (special tokens included).
  config.data.skip_empty_lines = True  # Skip and count empty lines of a .txt corpus; False = error.
  config.data.no_duplicates = False  # Never put the same text twice in a batch (it would be a false negative).
  # Prompts (instructions) put before the texts in training, kept with the model and applied by name when it encodes
  # (`Encoder.encode(..., prompt_name="query")`, `jaxcse-encode --prompt_name`, MTEB, the export): "query" before the
  # first (anchor) column, "document" before every other column; "" = none. E.g. "query: " and "passage: ".
  config.data.query_prompt = ""
  config.data.document_prompt = ""
  config.data.tfds_text_feature = "text"  # With train = "tfds:NAME[:split]": the Text feature to train on.
  config.data.tfds_data_dir = ""  # TFDS data folder for tfds: sources; empty = $TFDS_DATA_DIR or ~/tensorflow_datasets.
  config.data.heldout_fraction = 0.0  # Hold out this share of a .txt corpus's lines (by content hash) for evaluation.
  config.data.pack = False  # MLM pretraining: pack sentences into full max_seq_len sequences ([CLS] a [SEP] b [SEP]).

  config.loss = ml_collections.ConfigDict()
  config.loss.temperature = 0.05  # Softmax temperature of the contrastive loss.
  config.loss.hard_negative_weight = 0.0  # Supervised only: log-weight on each anchor's own hard negative.

  # method="mnrl": sentence-transformers 6's MultipleNegativesRankingLoss on columns anchor, positive, negative_1..k
  # (k >= 0); its defaults. With k = 1 and scale = 1 / loss.temperature it is supervised SimCSE (docs/methods.md).
  config.mnrl = ml_collections.ConfigDict()
  config.mnrl.scale = 20.0  # Multiplies the cosines: 1 / temperature (20 = temperature 0.05); at most 1e4.
  # Comma-separated, query_to_doc first and always: + doc_to_query (symmetric InfoNCE), query_to_query, doc_to_doc.
  config.mnrl.directions = "query_to_doc"
  config.mnrl.partition_mode = "joint"  # joint: one softmax over every direction; per_direction: one each, averaged.
  # none | in_batch_negatives | hard_negatives | all_negatives: which negatives' logits get the hardness penalty.
  config.mnrl.hardness_mode = "none"
  config.mnrl.hardness_strength = 0.0  # The penalty's alpha: + alpha x cosine (no gradient) on those logits; 0 to 1e4.

  # method="cosent": sentence-transformers 6's CoSENTLoss on (sentence1, sentence2) pairs with a gold score.
  config.cosent = ml_collections.ConfigDict()
  config.cosent.scale = 20.0  # Multiplies the cosines (s-t's default).

  # Matryoshka: the method's loss also on the first d dims of every embedding, normalised, for each d (any method).
  config.matryoshka = ml_collections.ConfigDict()
  config.matryoshka.dims = ""  # Comma-separated prefix sizes, e.g. "384,256,128,64" (the full width too); "": off.
  config.matryoshka.weights = ""  # Comma-separated, one per dim (any order of dims: paired as written); "": all 1.
  config.matryoshka.n_dims_per_step = -1  # -1: every dim each step; n: a random n of them each step.

  # method="gist": sentence-transformers 6's GISTEmbedLoss (GISTEmbed, arXiv 2402.16829) on columns anchor, positive,
  # negative_1..k: InfoNCE over [anchor-positive | anchor-anchor | positive-positive | anchor-negative] cosines, with
  # the candidates a frozen guide model scores above the anchor's positive (minus the margin) left out.
  config.gist = ml_collections.ConfigDict()
  # The guide: a jaxcse workdir, Hugging Face folder or hub id with the model's vocabulary; "" = model.name (the
  # starting model, frozen). It embeds the same tokens as the model, without dropout; no gradient, never saved.
  config.gist.guide_model = ""
  config.gist.temperature = 0.01  # Divides the cosines (s-t's default); > 0.
  # absolute: leave out a candidate the guide scores above (its positive's score - margin); relative: above
  # (score - |score| x margin), e.g. margin 0.05 keeps candidates up to 95% of the positive's score.
  config.gist.margin_strategy = "absolute"
  config.gist.margin = 0.0  # Any finite number; 0 leaves out what the guide scores above the positive.
  config.gist.contrast_anchors = True  # Also contrast each anchor with the other anchors (the paper's, s-t's default).
  config.gist.contrast_positives = True  # Also each positive with the other positives (False may help retrieval).

  # Learning from a teacher whose embeddings or scores the training data holds as each row's label (s-t 6's
  # convention): method="embed_distill" (EmbedDistillLoss; MSELoss = distance "mse"), "margin_mse" (MarginMSELoss),
  # "distill_kl_div" (DistillKLDivLoss). docs/own_data.md#learn-from-a-teacher.
  config.distill = ml_collections.ConfigDict()
  # embed_distill's distance to the teacher's embedding: mse (MSELoss), l2 (Euclidean) or cosine (1 - cosine;
  # EmbedDistillLoss's default).
  config.distill.distance = "mse"
  config.distill.similarity = "dot"  # margin_mse / distill_kl_div score query-candidate pairs: dot (s-t's) or cosine.
  config.distill.student_temperature = 1.0  # distill_kl_div: divides the student's scores; the loss is x its square.
  config.distill.teacher_temperature = 1.0  # distill_kl_div: divides the teacher's scores (the labels).

  # The spread-out regulariser (s-t 6's GlobalOrthogonalRegularizationLoss; Zhang et al. 2017, as EmbeddingGemma
  # adds it): method="gor" alone, or added to any method's loss with gor.enabled.
  config.gor = ml_collections.ConfigDict()
  config.gor.enabled = False  # Add it to the method's loss (each text column's embeddings, on the global batch).
  config.gor.mean_weight = 1.0  # x (mean off-diagonal similarity)^2; 0 leaves the term out; at most 1e4.
  config.gor.second_moment_weight = 1.0  # x max(0, mean squared off-diagonal similarity - 1 / dim); at most 1e4.
  config.gor.aggregation = "mean"  # Of the per-column terms: mean or sum.
  config.gor.similarity = "cosine"  # cosine (s-t's cos_sim) or dot.

  # RankCSE (Liu et al. 2023; method="rankcse"): SimCSE + the two views' ranking consistency + listwise distillation
  # of a teacher's in-batch similarity lists; each row's label is its text's teacher embedding. The defaults are the
  # released run script's (temp = tau2 = 0.05, gamma 1, alpha 0.33). docs/methods.md#rankcse.
  config.rankcse = ml_collections.ConfigDict()
  config.rankcse.distillation = "listnet"  # listnet (top-one cross entropy) or listmle (Plackett-Luce likelihood).
  config.rankcse.tau2 = 0.05  # Divides the student's and the teacher's cosines in the distillation term.
  config.rankcse.gamma = 1.0  # x the distillation term; in [0, 1e4].
  config.rankcse.alpha = 0.33  # Two teachers (labels [2, D]): alpha x the first's lists + (1 - alpha) x the second's.
  # The consistency term: as_released (the code's: the two softmaxes' negative entropy) or jsd (the paper's).
  config.rankcse.consistency = "as_released"
  config.rankcse.consistency_weight = 1.0  # x the consistency term (the released code: 1); in [0, 1e4].

  # SimCSE's own ablations of its positive pairs (its Tables 1 and 3); all off = the paper's method.
  config.augment = ml_collections.ConfigDict()
  # "Fixed 0.1": both views of a sentence get the same dropout mask (so identical embeddings); one-column data only.
  config.augment.same_dropout_mask = False
  # Discrete augmentations of the second view, on its WordPiece ids (a word = a piece and its ## pieces), applied in
  # this order; k of n words is round-half-up(k x n). Combine them freely (e.g. crop 0.1 + mlm 0.15).
  config.augment.crop = 0.0  # Keep a random contiguous span of (1 - crop) of the words ("crop k%"); 0 = off.
  # N > 0: crop the whole sentence, not its first data.max_seq_len tokens: the training batches are tokenized to N
  # tokens (N >= data.max_seq_len), the second view is cropped on them, then both views are cut to data.max_seq_len
  # as the tokenizer cuts (the first view is then the one of 0). Needs augment.crop alone and a one-column text corpus.
  # 0 = off: crop after truncation (jaxcse's and the official code's default).
  config.augment.crop_before_truncation = 0
  config.augment.word_deletion = 0.0  # Delete this share of the words at random ("word deletion k%"); 0 = off.
  config.augment.delete_one_word = False  # Delete one word at random ("delete one word").
  config.augment.mlm = 0.0  # Replace this share of the words by samples of a frozen masked LM ("MLM k%"); 0 = off.
  # That masked LM ("" = model.name: the starting encoder with its pretrained MLM head); frozen, never saved.
  config.augment.mlm_model = ""

  config.mlm = ml_collections.ConfigDict()
  config.mlm.enabled = False  # SimCSE's do_mlm: add a masked-LM loss on the same encoder.
  config.mlm.weight = 0.1  # Its weight (SimCSE's mlm_weight).
  # Its head: untied_fresh (SimCSE's code: a new BertLMPredictionHead with its own output matrix), untied_pretrained
  # (the checkpoint's head, output matrix a copy of the word embeddings) or tied (the checkpoint's head, tied).
  config.mlm.head = "untied_fresh"
  config.mlm.probability = 0.15  # Share of tokens chosen for prediction (80% [MASK], 10% random, 10% kept).
  config.mlm.max_predictions = 0  # Method mlm: predictions per sequence (0 = ceil(probability x max_seq_len)).

  config.train = ml_collections.ConfigDict()
  config.train.batch_size = 64  # Global batch (all devices); in-batch negatives span it.
  config.train.num_epochs = 1  # Passes over the corpus; ignored when max_steps > 0.
  config.train.max_steps = -1  # > 0: train exactly this many steps (the lr decays over them); -1: num_epochs epochs.
  config.train.learning_rate = 3e-5  # Peak AdamW learning rate.
  config.train.warmup_steps = 0  # Linear warmup steps before the linear decay to 0.
  config.train.weight_decay = 0.0  # AdamW decoupled weight decay (not on biases and LayerNorm).
  config.train.adam_b1 = 0.9  # AdamW beta1 (torch/HF default).
  config.train.adam_b2 = 0.999  # AdamW beta2 (torch/HF default).
  config.train.adam_eps = 1e-8  # AdamW epsilon (torch/HF default).
  config.train.max_grad_norm = 1.0  # Global-norm gradient clipping (HF Trainer's default); 0 = off.
  # GPUs of the official run whose DDP mean divides the gradient before clipping (it sees full gradient / n). Adam
  # is scale-free, so only the clipping changes; 1 = clip the full gradient.
  config.train.official_world_size = 1
  # GradCache: embed the batch in chunks of this many examples (0 = off; must divide batch_size). Negatives still
  # span the whole batch; activation memory is one chunk's, for a second forward pass. Chunk i gets its own dropout key.
  config.train.grad_cache_chunk = 0
  # Packed rows: the step's texts (every view of every column) laid end to end in rows of real tokens, each text
  # attending only to itself (docs/training.md#packed-rows): the padding up to data.max_seq_len is not computed.
  # The same loss in exact arithmetic; with dropout on, other masks. One device; not with GradCache, augment.*,
  # augment.same_dropout_mask or a method that attends the padding (DCLR).
  config.train.packed = False
  config.train.log_every = 10  # Steps between lines in metrics.jsonl.

  config.eval = ml_collections.ConfigDict()
  config.eval.every = 125  # Evaluate STS-B dev every this many steps and keep the best checkpoint.
  config.eval.at_start = False  # Also evaluate before the first step (reports the starting point).
  config.eval.at_end = True  # Also evaluate after the last step.
  # Model selection: stsb_dev, stsb_sickr_dev (DCLR's), heldout_mlm_accuracy (mlm), or a number of your own dev sets
  # below: pairs_spearman, pairs_pearson, retrieval_ndcg@10, retrieval_mrr@10, retrieval_map@100, retrieval_recall@10..
  config.eval.metric = "stsb_dev"
  # Your own dev sets, scored at each evaluation as sentence-transformers' evaluators score them (docs/evaluation.md):
  config.eval.pairs = ""  # A .jsonl/.csv/.parquet of sentence1, sentence2, score ("" = none): pairs_spearman, ...
  config.eval.retrieval = ""  # A folder of queries, corpus and qrels files ("" = none): retrieval_ndcg@10, ...
  config.eval.batch_size = 128  # Sentences per encoding batch during evaluation.
  config.eval.sickr_dev = True  # Also score SICK-R dev at each evaluation (logged; stsb_sickr_dev needs it).

  config.log = ml_collections.ConfigDict()
  # Also write metrics.jsonl's numbers as TensorBoard scalars in WORKDIR/tensorboard (pip install "jaxcse[tensorboard]").
  config.log.tensorboard = False

  config.checkpoint = ml_collections.ConfigDict()
  config.checkpoint.every = 250  # Save the latest train state every this many steps (and at the end).
  return config

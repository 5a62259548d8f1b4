"""Training: the run around the loop, a config's checks and models, the pure train step, the methods' objectives and
losses, devices.

  inputs.py         what a run reads (workdir state, model, corpus and batches, dev sets), checked before it writes
  start.py          the start point carried out: bad checkpoints set aside, the fresh or restored train state
  run_log.py        metrics.jsonl and TensorBoard, step metrics read one step late, non-finite losses caught
  configuration.py  every config field checked at load, before anything is computed or written
  configured.py     the models a config asks for, built once: with weights (training) or as shapes (compiling)
  cli.py            the commands' flags, the shipped configs by name, ``--help``, one-line mistakes
  train_step.py     the pure step: embed the views, the objective's loss, gradients (plain or GradCache), update
  views.py          a batch's views as encoder rows and their embeddings, in one forward pass
  masked_lm.py      the step's masked-LM term (pretraining, or SimCSE's auxiliary loss): targets and sums
  objectives.py     methods by name: their loss on the global batch, their needs, the scores they log
  st_methods.py     sentence-transformers' losses as methods (ranking, distillation, the spread-out regulariser)
  losses.py         SimCSE's and MixCSE's contrastive losses (and the cosines all share), pure functions on embeddings
  dclr_losses.py    DCLR's noise negatives (an ascent written with jax.grad), instance weights and loss
  ranking_losses.py sentence-transformers' MultipleNegativesRankingLoss and CoSENT, pure functions on embeddings
  distill_losses.py its distillation losses (EmbedDistill/MSE, MarginMSE, DistillKLDiv) and global orthogonal
                    regulariser, pure functions on embeddings and a teacher's labels
  rankcse_losses.py RankCSE's ranking distillation (ListNet, ListMLE) and view consistency, pure functions on
                    similarity lists
  matryoshka.py     any method's loss over nested prefixes of the embeddings (Matryoshka), summed with weights
  gradcache.py      chunked value-and-grad over a whole batch's embeddings
  augment.py        discrete augmentations of token ids, pure
  distributed.py    the device mesh, multi-host runs, agreement checks

The loop itself is ``jaxcse/train.py`` (``python -m jaxcse.train``).
"""

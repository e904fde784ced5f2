"""Default ResNet params: every key a run reads, with the reference's (RESNET_CFG) values where we share a key.

Deliberate differences from the reference, each for a stated reason:
- ``use_tpu`` False and ``strategy`` 'auto': the run picks TPU/GPUs/CPU itself, so `--use_tpu=false` on a laptop works.
- ``transpose_input`` False: the HWCN infeed trick helped TPUEstimator, not TF2's TPUStrategy.
- ``use_cache`` False: caching ImageNet needs ~150 GB of host RAM; the TPU config turns it on.
- ``num_parallel_calls`` -1 means tf.data AUTOTUNE.
Keys that only describe a run (model_dir, data_dir, export_dir, ...) live here too, so that ``params.yaml`` in
``model_dir`` fully describes what ran.
"""

RESNET_CFG = {
    # --- model ---
    'resnet_depth': 50,
    'num_label_classes': 1000,          # 1001 keeps the stored 1-based labels (class 0 = background)
    'data_format': 'channels_last',
    'pre_activation': False,            # ResNet v2 (pre-activation) blocks
    'bn_momentum': 0.9,
    'bn_epsilon': 1e-5,
    'dropout_rate': None,               # dropout before the classifier; None or 0 = off
    'dropblock_groups': '',             # e.g. '3,4' (groups 1..4)
    'dropblock_keep_prob': None,        # final keep prob, required when dropblock_groups is set
    'dropblock_size': 7,
    'precision': 'bfloat16',            # float32 | bfloat16 | float16 (float16 uses dynamic loss scaling)
    'jit_compile': False,               # XLA for the train step: ~2x slower on CPU, faster on GPU/TPU
    # --- data ---
    'data_dir': None,                   # train-*/validation-*/test-* TFRecords; None or 'null' = synthetic data
    'image_size': 224,
    'num_train_images': 1281167,
    'num_eval_images': 50000,
    'num_test_images': None,            # predict: how many images to predict (None = all)
    'labels_file': None,                # class names, one per line; None = <data_dir>/labels.txt if present
    'input_pipeline': 'optimized',      # optimized | basic (the seed's sequential pipeline, for comparison)
    'synthetic_data': 'random',         # random | constant, used when data_dir is unset
    'use_cache': False,
    'shuffle_buffer_size': 1024,
    'min_crop_area': 0.08,              # smallest random-crop area (fraction of the image) in training
    'num_parallel_calls': -1,           # -1 = AUTOTUNE
    'transpose_input': False,
    # --- optimisation ---
    'train_batch_size': 1024,           # global
    'eval_batch_size': 1024,            # global
    'predict_batch_size': 256,          # global
    'train_steps': 112590,
    'base_learning_rate': 0.1,          # for a global batch of 256, scaled linearly
    'lr_schedule': 'stepwise',          # stepwise (reference) | cosine | exponential (the seeds' ramp-up/decay)
    'lr_warmup_epochs': 5.0,            # stepwise/cosine warm-up, in epochs of a 90-epoch run (scaled to train_steps)
    'lr_rampup_epochs': 5.0,            # exponential schedule: linear ramp from lr_start to the peak
    'lr_sustain_epochs': 0.0,           # exponential schedule: epochs held at the peak
    'lr_exp_decay': 0.8,                # exponential schedule: decay per epoch after the sustain
    'lr_start': 1e-5,                   # exponential schedule: first LR
    'lr_min': 1e-5,                     # exponential schedule: floor
    'momentum': 0.9,
    'use_nesterov': True,
    'weight_decay': 1e-4,               # wd * sum(w^2)/2 over non-BN variables
    'label_smoothing': 0.0,
    'random_seed': None,
    # --- loop, checkpoints, summaries ---
    'strategy': 'auto',                 # auto | one_device | mirrored | multi_worker_mirrored | tpu
    'use_tpu': False,
    'tpu': None,
    'num_cores': 8,                     # kept for reference configs; the replica count comes from the strategy
    'model_dir': None,
    'iterations_per_loop': 1251,
    'steps_per_eval': 1251,
    'save_checkpoints_steps': None,     # None = max(5000, iterations_per_loop); rounded up to a loop boundary
    'keep_checkpoint_max': 5,
    'skip_host_call': False,            # True turns off the per-loop TensorBoard scalars
    'eval_timeout': None,               # seconds to wait for a new checkpoint in eval mode; None = forever
    'stop_on_nan': True,
    # --- warm start, export, predict ---
    'resnet_checkpoint': None,          # warm start from this checkpoint (file prefix or directory)
    'export_dir': None,
    'predict_top_k': 5,
    # --- profiling ---
    'profile_every_n_steps': 0,         # > 0: capture a trace every N steps
    'tpu_profile_duration': 1000,       # ms per periodic capture
    'profile_steps': '',                # 'A,B': one capture of steps A..B
    'profiler_port': 0,                 # > 0: start a profiler server on this port (listens on all interfaces)
}

RESNET_RESTRICTIONS = [
    'resnet_depth in [18, 34, 50, 101, 152, 200]',
    'num_label_classes > 0',
    'image_size >= 32',
    "data_format in ['channels_last', 'channels_first']",
    "precision in ['float32', 'bfloat16', 'float16']",
    "input_pipeline in ['optimized', 'basic']",
    "synthetic_data in ['random', 'constant']",
    "lr_schedule in ['stepwise', 'cosine', 'exponential']",
    "strategy in ['auto', 'one_device', 'mirrored', 'multi_worker_mirrored', 'tpu']",
    'train_batch_size > 0',
    'eval_batch_size > 0',
    'predict_batch_size > 0',
    'train_steps >= 0',
    'iterations_per_loop > 0',
    'steps_per_eval > 0',
    'keep_checkpoint_max > 0',
    'label_smoothing >= 0',
    'label_smoothing < 1',
    'weight_decay >= 0',
    'dropblock_size > 0',
    'min_crop_area > 0',
    'min_crop_area <= 1',
    'predict_top_k > 0',
    'profile_every_n_steps >= 0',
    'tpu_profile_duration > 0',
    # Ordering restrictions on a key whose value is None hold (None = unset), see ParamsDict.validate().
    'num_cores > 0',
    'num_train_images > 0',
    'num_eval_images >= 0',
    'num_test_images > 0',
    'base_learning_rate >= 0',
    'momentum >= 0',
    'bn_momentum >= 0',
    'bn_momentum < 1',
    'bn_epsilon > 0',
    'dropout_rate >= 0',
    'dropout_rate < 1',
    'dropblock_keep_prob > 0',
    'dropblock_keep_prob <= 1',
    'shuffle_buffer_size >= 0',
    'num_parallel_calls >= -1',
    'num_parallel_calls != 0',
    'save_checkpoints_steps > 0',
    'eval_timeout >= 0',
    'lr_warmup_epochs >= 0',
    'lr_rampup_epochs >= 0',
    'lr_sustain_epochs >= 0',
    'lr_exp_decay > 0',
    'lr_start >= 0',
    'lr_min >= 0',
    'profiler_port >= 0',
    'profiler_port <= 65535',
]

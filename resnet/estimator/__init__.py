"""An Estimator-style trainer on tf.distribute: TPUEstimator's contract without tf.estimator.

- ``spec``: ModeKeys, EstimatorSpec (what model_fn returns), ServingInput, ObjectScope (model_fn's objects),
  RunParams / RunContext (what model_fn and input_fn receive: settings, per-replica batch, run-time state).
- ``run_config``: RunConfig (loop, checkpoint and summary settings; ``from_params``) and the strategy names.
- ``estimator``: Estimator, the controller: *when* to train, evaluate, save, log, stop; predict; export.
- ``loops``: *what* a compiled step does (replica functions, the multi-step loop; XLA per replica step).
- ``checkpoints``, ``stopping``, ``export``, ``files``: checkpoints in model_dir, signals and the multi-worker
  stop vote, SavedModel export, atomic writes.
- ``distribution``: strategy selection; ``hooks``, ``profiler_hook``, ``profile_analysis``: loop hooks.
Nothing here knows about images or ResNet (tests/test_layering.py checks the imports).
"""

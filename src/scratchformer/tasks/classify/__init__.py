"""Text classification, in the slots every task fills:

    recipe.py      ClassifyRecipe (data / model / train sections), saved as config.json
    data.py        where texts come from, tokenizers, text -> segments, EncodedSplit.batches(epoch)
    task.py        ClassificationTask: the Trainer's view (batch -> loss, metrics, report)
    pretrained.py  --init: a `pretrain mlm` run or a BERT checkpoint as the backbone
    pipeline.py    train_classifier (and ensembles): what `scratchformer train classify` runs
    report.py      accuracy, per-class and macro F1, the confusion plot
    inference.py   Classifier.load(run_dir).predict([...]) (EnsembleClassifier for ensembles,
                   BlendedClassifier for a run blended with its TF-IDF baseline)
and what `train classify` adds around one model:
    auto.py        the adaptive default (no --config): a recipe chosen from the data
    budget.py      --time-budget: time a few steps, plan the steps (and seeds) that fit
    baseline.py    the TF-IDF + logistic regression baseline beside every result (saved without pickle)
    blend.py       ours averaged with that baseline, the weight chosen on valid (`scratchformer blend RUN`)
    distill.py     one model taught by a finished run's probabilities (--teacher RUN)
"""
from .data import (ClassifyBatch, DocumentEncoder, EncodedSplit, build_tokenizer_for, collate, encoder_for,
                   load_classification, load_tokenizer, save_tokenizer)
from .inference import BlendedClassifier, Classifier, EnsembleClassifier
from .pipeline import train_classifier, train_ensemble
from .pretrained import InitSource, load_init
from .recipe import ClassifyDataConfig, ClassifyRecipe
from .report import confusion_matrix, format_report, plot_confusion, report, write_report
from .task import ClassificationTask

__all__ = [
    "BlendedClassifier", "ClassificationTask", "Classifier", "ClassifyBatch", "ClassifyDataConfig", "ClassifyRecipe",
    "DocumentEncoder", "EncodedSplit", "EnsembleClassifier", "InitSource", "build_tokenizer_for", "collate",
    "confusion_matrix", "encoder_for", "format_report", "load_classification", "load_init", "load_tokenizer",
    "plot_confusion", "report", "save_tokenizer", "train_classifier", "train_ensemble", "write_report",
]

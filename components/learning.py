"""Whether a training run learned anything: a loss that is not a number, or one still at chance.

A classifier that has learned nothing but how common each class is has a cross-entropy loss of their entropy:
ln(classes) when they are balanced, 2.303 for 10 classes, 0.693 for 2. A loss still within 1% of it (or above it)
after the first epochs means the model has learned nothing yet; one that ends there means the run learned nothing.
Train warns as soon as it sees either, with what to try; evaluate refuses to bless a run that ended there, with that
reason first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# how close to ln(classes) counts as chance (a run at chance sits within 0.1% of it), and after how many epochs
CHANCE_MARGIN = 0.01
FIRST_EPOCHS = 3


def chance_loss(class_counts: Sequence[int]) -> float:
    """The cross-entropy of a model that has learned nothing but the classes' shares of the training examples (their
    entropy): ln(classes) when they are balanced."""
    total = sum(class_counts)
    return -sum(count / total * math.log(count / total) for count in class_counts if count)


def not_learning(
    losses: Sequence[float],
    num_classes: int,
    first_epochs: int = FIRST_EPOCHS,
    class_counts: Sequence[int] | None = None,
) -> str | None:
    """Why the training losses so far (one per epoch) show no learning, or None.

    A loss that is not a finite number, at any epoch; or, once ``first_epochs`` epochs have run, a last loss no
    better than chance (within ``CHANCE_MARGIN`` of it, or above it): ``chance_loss`` of ``class_counts`` (the
    training split's examples per class), ln(``num_classes``) without them."""
    for epoch, loss in enumerate(losses, start=1):
        if not math.isfinite(loss):
            return f"the training loss is {loss} at epoch {epoch}: the weights diverged"
    if num_classes < 2 or len(losses) < first_epochs:
        return None
    uniform = math.log(num_classes)
    chance = chance_loss(class_counts) if class_counts and sum(class_counts) else uniform
    if losses[-1] < (1 - CHANCE_MARGIN) * chance:
        return None
    why = (
        f"chance for {num_classes} classes (ln {num_classes} = {uniform:.4f})"
        if abs(chance - uniform) <= 1e-3
        else f"no better than the classes' own shares of the examples (their entropy: {chance:.4f})"
    )
    return f"the training loss is still {losses[-1]:.4f} after {len(losses)} epochs: {why}, so nothing was learned"


def what_to_try(learning_rate: float, image_size: int | None, model_name: str, source_size: int | None = None) -> str:
    """The usual causes of a run that does not learn, with this run's values."""
    tries = [f"a smaller --learning-rate (this run: {learning_rate:g})"]
    if image_size:
        near = f"; the source's images are about {source_size} px" if source_size else ""
        tries.append(f"an --image-size nearer the images' own size (this run: {image_size}{near})")
    from components.models import BATCH_NORM_MODELS

    normalised = BATCH_NORM_MODELS[0]
    other = "" if model_name in BATCH_NORM_MODELS else f"; {normalised} normalises its activations with batch norm"
    tries.append(f"another --model (this run: {model_name}{other})")
    return "try " + ", ".join(tries)

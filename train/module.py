"""LightningModule for full-parameter (or LoRA) SFT of Qwen3-VL (paper supplementary A, Table 6)."""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Literal

import lightning as L
import torch
from cader.train.loss import labelled_loss
from cader.train.pixels import PIXEL_NORMS, normalize_pixels
from cader.train.schedule import make_scheduler, optimizer_steps, warmup_steps

log = logging.getLogger(__name__)

# LoRA on the language model's projections only (the vision tower's `qkv`/`proj` names are left alone)
DEFAULT_LORA_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


@dataclass(frozen=True)
class Optimization:
    """AdamW and its learning-rate schedule (paper supplementary A, Table 6).

    Args:
        lr: peak learning rate of AdamW (paper Table 6: 1e-5).
        weight_decay: AdamW weight decay of the weight matrices (biases and norms get none).
        betas: AdamW's (beta1, beta2).
        warmup_ratio: share of the optimizer steps spent in linear warmup from 0 to `lr` (Table 6: 0.1), then
            `lr_scheduler_type` over the rest; counted on the real number of optimizer steps.
        lr_scheduler_type: decay after warmup, as LLaMA-Factory/transformers name it: "cosine" (Table 6) to 0,
            "linear" to 0, or "constant_with_warmup".
    """

    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_ratio: float = 0.1
    lr_scheduler_type: Literal["cosine", "linear", "constant_with_warmup"] = "cosine"


@dataclass(frozen=True)
class Trainable:
    """Which weights train: the parts kept frozen, and LoRA adapters instead of full-parameter SFT.

    Args:
        freeze_vision_tower: keep the vision encoder's parameters fixed.
        freeze_merger: keep the vision-to-language merger (projector) fixed.
        freeze_language_model: keep the language model fixed (with LoRA: its adapters still train).
        lora_r: 0 = full-parameter SFT (the paper); > 0 trains LoRA adapters of this rank (merged into the
            weights on export).
        lora_alpha: LoRA scaling numerator (the update is scaled by lora_alpha / lora_r).
        lora_dropout: dropout on the LoRA branch's input.
        lora_targets: modules that get adapters: a regular expression over module names, or a list of names
            (default: the language model's attention and MLP projections, not the vision tower).
    """

    freeze_vision_tower: bool = False
    freeze_merger: bool = False
    freeze_language_model: bool = False
    lora_r: int = 0
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: str | list[str] = DEFAULT_LORA_TARGETS


@dataclass(frozen=True)
class ModuleSettings(Trainable, Optimization):
    """SFTModule's grouped settings, one base class per group; their fields are keys of `model:` as they stand
    (`--model.lr`, `--model.lora_r`), so configs and command lines name them without the group."""


class SFTModule(L.LightningModule):
    def __init__(self, model_path: str, dtype: str = "float32", seed: int = 0, gradient_checkpointing: bool = False,
                 vision_guard: bool = True, loss_positions: Literal["labelled", "all"] = "labelled", **settings):
        """
        Args:
            model_path: HF folder or hub id (Qwen3-VL-8B-Instruct for the paper recipe).
            dtype: weights' dtype at load; use the trainer's precision ("bf16-true"/"bf16-mixed") for bf16 on GPU.
            seed: torch seed set before the weights load (LoRA initialisation and any random init).
            gradient_checkpointing: recompute activations in backward (needed at 10,240 tokens on the 8B model).
            vision_guard: with more than one process, run the vision tower in lockstep on every rank (image slot,
                video slot, then the language model; a dummy input for a modality the batch lacks), because ZeRO-3
                gathers parameters collectively and hangs when one rank skips the tower (see `_lockstep_vision`).
            loss_positions: where lm_head and the cross-entropy run: "labelled" (the labelled positions only,
                `cader.train.loss`; memory grows with the target, not the sequence) or "all" (transformers' own
                `model(**inputs).loss`). The same loss up to float summation order; the tiny recipes keep "all"
                because their short training is chaotic: a 1e-7 change of one step moves the miniature's final
                model, and its measured numbers (docs/miniature.md) were made with it.
            settings: the fields of Optimization and Trainable (ModuleSettings), by name.
        """
        super().__init__()
        self.settings = ModuleSettings(**settings)
        settings.update(asdict(self.settings))   # hparams (read from this frame) hold every setting, defaults included
        self.save_hyperparameters()
        torch.manual_seed(seed)
        self._last_time, self._grad_norm = None, None

    # ---- weights ----
    @property
    def model(self):
        """The Qwen3-VL (peft-wrapped with LoRA). Inside a Trainer, `configure_model` creates it under the strategy's
        init context; used without one (a bare loop, a test), the first access loads it whole."""
        if "model" not in self._modules:
            self.configure_model()
        return self._modules["model"]

    def configure_model(self) -> None:
        """Materialise the weights. Lightning calls this under the strategy's init context: with ZeRO-3 inside
        `deepspeed.zero.Init`, where each rank reads only its partition (cader.train.strategies), elsewhere a whole
        load per rank. Lightning calls it again on every fit/validate in the same process: the weights of the first
        call are kept."""
        if "model" in self._modules:
            return
        from cader.train.strategies import load_model_for

        hp, trainable = self.hparams, self.settings
        strategy = self._trainer.strategy if self._trainer is not None else None
        self.model = load_model_for(strategy, hp.model_path, hp.dtype).train()
        self._apply_freezing()
        if trainable.lora_r > 0:
            self.model = self._with_lora(self.model)
        if hp.gradient_checkpointing:
            enable_checkpointing(self.model, {"use_reentrant": False})
            if trainable.lora_r > 0 or trainable.freeze_language_model:
                self.model.enable_input_require_grads()
        numel = [getattr(p, "ds_numel", p.numel()) for p in self.model.parameters()]   # ZeRO-3: the full size
        trainable = sum(n for n, p in zip(numel, self.model.parameters()) if p.requires_grad)
        log.info("trainable parameters: %d / %d", trainable, sum(numel))

    def _with_lora(self, model):
        """`model` with LoRA adapters, created outside zero.Init and from their own seed: the adapters' initial
        values (lora_B zero) are the same whatever the strategy and whenever the hook runs."""
        from cader.train.strategies import outside_zero_init
        from peft import LoraConfig, get_peft_model

        lora = self.settings
        config = LoraConfig(r=lora.lora_r, lora_alpha=lora.lora_alpha, lora_dropout=lora.lora_dropout,
                            target_modules=lora.lora_targets, bias="none")
        with outside_zero_init(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.hparams.seed)
            return get_peft_model(model, config)

    # ---- model surgery ----
    def _core(self):
        """Qwen3VLModel (holds .visual and .language_model) under the ForConditionalGeneration wrapper."""
        return self.model.model

    def _apply_freezing(self) -> None:
        core = self._core()
        visual = core.visual
        mergers = [visual.merger, *getattr(visual, "deepstack_merger_list", [])]
        merger_params = {id(p) for m in mergers for p in m.parameters()}
        if self.settings.freeze_vision_tower:
            for p in visual.parameters():
                if id(p) not in merger_params:
                    p.requires_grad_(False)
        if self.settings.freeze_merger:
            for m in mergers:
                m.requires_grad_(False)
        if self.settings.freeze_language_model:
            core.language_model.requires_grad_(False)
            self.model.lm_head.requires_grad_(False)

    def _vl_model(self):
        """Qwen3VLModel (visual + language model), also under a peft wrapper."""
        model = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        return model.model

    def _visual(self):
        return self._vl_model().visual

    def _lm_head(self):
        model = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        return model.lm_head

    def _dummy_tower_term(self) -> torch.Tensor:
        """0 * (vision tower on a 2x2-patch dummy): a tower call that changes nothing but takes part in ZeRO-3."""
        visual = self._visual()
        cfg = visual.config
        dim = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size ** 2
        merge = cfg.spatial_merge_size
        pixels = torch.zeros(merge * merge, dim, device=self.device, dtype=visual.dtype)
        grid = torch.tensor([[1, merge, merge]], device=self.device)
        out = visual(pixels, grid_thw=grid, return_dict=True)
        feats = [out.pooler_output, *(out.deepstack_features or [])]
        return sum(f.float().sum() for f in feats) * 0.0

    def _lockstep_vision(self, batch: dict) -> tuple[dict, torch.Tensor]:
        """Run the vision tower exactly twice on every rank, image slot then video slot, before the language model.

        ZeRO-3 gathers each module's parameters collectively when it runs, so all ranks must run the same modules in
        the same order; a rank without images or videos (text-only, image-only) would skip the tower or reach it at
        a different point and hang or corrupt the collective. Present modalities are encoded here and handed to the
        model as `mm_encoder_outputs` (the model then only embeds tokens and runs the language model); a missing one
        is replaced by a dummy call whose zero-weighted output joins the loss, so backward matches too.
        Returns (model kwargs, guard term to add to the loss).
        """
        core, inputs, encoded = self._vl_model(), dict(batch), {}
        guard = torch.zeros((), device=self.device)
        for modality, pixels, grid in (("image", "pixel_values", "image_grid_thw"),
                                       ("video", "pixel_values_videos", "video_grid_thw")):
            if pixels in inputs:
                encode = core.get_image_features if modality == "image" else core.get_video_features
                encoded[modality] = encode(inputs.pop(pixels), inputs[grid], return_dict=True)
            else:
                guard = guard + self._dummy_tower_term()
        if encoded:
            inputs["mm_encoder_outputs"] = encoded
        return inputs, guard

    # ---- training ----
    def forward(self, **batch):
        return self.model(**batch)

    def sft_loss(self, inputs: dict) -> torch.Tensor:
        """Mean next-token cross-entropy over the labelled tokens of `inputs` (model kwargs with `labels`), the
        number `self.model(**inputs).loss` gives, with `lm_head` run at the labelled positions only
        (`cader.train.loss`): the base Qwen3VLModel (under LoRA too) returns the last hidden states and the loss
        tail grows with the target, not with the whole sequence."""
        if self.hparams.get("loss_positions", "labelled") == "all":
            return self.model(**inputs).loss
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        hidden = self._vl_model()(**inputs, use_cache=False).last_hidden_state
        return labelled_loss(hidden, labels, self._lm_head())

    def _log_step(self) -> bool:
        """Whether this step's metrics reach the logger (Lightning writes every log_every_n_steps optimizer steps);
        the extra metrics are only computed then (a grad-norm pass and five self.log calls a step cost ~10 %
        of a tiny model's step)."""
        n = max(1, self.trainer.log_every_n_steps)
        return (self.global_step + 1) % n == 0

    def model_inputs(self, batch: dict) -> dict:
        """The batch as model inputs: uint8 pixels (as the DataLoader workers hand them over) normalised here, on
        the device, then given the dtype the trainer's precision gives every floating input (what the fp32 pixels
        got before they crossed as uint8)."""
        if PIXEL_NORMS not in batch:
            return normalize_pixels(batch)   # still refuses uint8 pixels without their normalisation
        inputs = normalize_pixels(batch)
        if self._trainer is not None:
            inputs = self.trainer.precision_plugin.convert_input(inputs)
        return inputs

    def training_step(self, batch, batch_idx):
        if "input_ids" not in batch:   # every sample of the batch failed to decode (counted in data_report.json)
            return self._empty_batch_step(batch_idx)
        batch = self.model_inputs(batch)
        inputs, guard = batch, None
        if self.hparams.vision_guard and self.trainer.world_size > 1:   # one process has nobody to wait for
            inputs, guard = self._lockstep_vision(batch)
        loss = self.sft_loss(inputs)
        if guard is not None:
            loss = loss + guard
        mask = batch["attention_mask"]
        self.log("train_loss", loss.detach(), on_step=True, prog_bar=True, batch_size=mask.shape[0])
        now = time.perf_counter()
        if self._log_step():
            real = int(mask.sum())
            metrics = {"padded_fraction": 1.0 - real / mask.numel(), "lr": self.optimizers().param_groups[0]["lr"]}
            if self._last_time is not None:
                metrics["tokens_per_s"] = real * self.trainer.world_size / max(now - self._last_time, 1e-9)
            self.log_dict(metrics, on_step=True, batch_size=mask.shape[0], rank_zero_only=True)
        self._last_time = now
        return loss

    def _empty_batch_step(self, batch_idx: int):
        """The step of a batch whose every sample failed to decode. One process skips it (None). With several,
        this rank must still run the same forward and backward as the others, or their gradient reduction and
        ZeRO-3 gathers wait for it forever: a one-token dummy through the model (and the vision tower's dummy
        calls under vision_guard), weighted 0, so the rank adds zero gradients to the step."""
        log.warning("batch %d: every sample failed to decode (see data_report.json); no data this step", batch_idx)
        if self.trainer.world_size == 1:
            return None
        dummy = {"input_ids": torch.zeros(1, 1, dtype=torch.long, device=self.device),
                 "attention_mask": torch.ones(1, 1, dtype=torch.long, device=self.device)}
        inputs, guard = dummy, torch.zeros((), device=self.device)
        if self.hparams.vision_guard:
            inputs, guard = self._lockstep_vision(dummy)
        return self.model(**inputs).logits.float().sum() * 0.0 + guard

    def on_train_end(self):
        finish = getattr(self.trainer.datamodule, "finish_report", None)
        if finish is not None:   # every rank's decode failures into data_report.json
            finish()

    def on_train_batch_start(self, batch, batch_idx):
        # position in the epoch for exact resume (ResumableLoader.state_dict); set before checkpoint callbacks run
        loader = self.trainer.train_dataloader
        if hasattr(loader, "consumed"):
            loader.consumed = batch_idx + 1

    def on_before_optimizer_step(self, optimizer):
        if not self._log_step():
            return
        grads = [p.grad.detach().float().norm() for p in self.parameters() if p.grad is not None]
        if grads:
            self.log("grad_norm", torch.stack(grads).norm(), on_step=True)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        engine = getattr(self.trainer.strategy, "deepspeed_engine", None)
        if engine is not None and engine.is_gradient_accumulation_boundary() and self._log_step():
            norm = engine.get_global_grad_norm()
            if norm is not None:
                self.log("grad_norm", float(norm), on_step=True)

    def _total_optimizer_steps(self) -> int:
        """Real optimizer steps of this fit. Computed from the datamodule when it can tell: Lightning's
        `estimated_stepping_batches` builds the train loader before the checkpoint is restored, which would defeat
        the loader's mid-epoch resume state."""
        trainer, dm = self.trainer, self.trainer.datamodule
        if dm is None or not hasattr(dm, "batches_per_rank"):
            return int(trainer.estimated_stepping_batches)
        steps = optimizer_steps(dm.batches_per_rank(trainer.world_size), trainer.accumulate_grad_batches,
                                epochs=max(1, trainer.max_epochs or 1))
        return min(steps, trainer.max_steps) if trainer.max_steps and trainer.max_steps > 0 else steps

    def configure_optimizers(self):
        params = [p for p in self.model.parameters() if p.requires_grad]
        # a ZeRO-3 parameter is a 1-D placeholder here: its real shape is ds_shape
        decay = [p for p in params if len(getattr(p, "ds_shape", p.shape)) >= 2]
        no_decay = [p for p in params if len(getattr(p, "ds_shape", p.shape)) < 2]
        opt = self.settings
        groups = [{"params": decay, "weight_decay": opt.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        # DeepSpeed drops an empty group (LoRA trains matrices only), and the scheduler must see the same groups
        groups = [g for g in groups if g["params"]]
        optimizer = torch.optim.AdamW(groups, lr=opt.lr, betas=tuple(opt.betas))
        total = self._total_optimizer_steps()
        warm = warmup_steps(total, opt.warmup_ratio)
        log.info("optimizer steps %d, warmup %d, %s decay", total, warm, opt.lr_scheduler_type)
        scheduler = make_scheduler(optimizer, opt.lr_scheduler_type, total, warm)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def enable_checkpointing(model, kwargs: dict) -> None:
    """Activation checkpointing under the name the installed transformers gives it: 5.x renamed
    `gradient_checkpointing_enable` to `activation_checkpointing_enable` and warns (FutureWarning) on the old name."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)

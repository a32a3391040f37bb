"""A Vision Transformer from the course's own layers (lesson 23), checked against transformers' ViT, DINOv2 and DINOv3.

The picture's p x p patches (attn.vision.patches) become tokens through one linear layer (a convolution with kernel
and stride p, written as a matrix product); a learned class token goes first, then ``registers`` learned register
tokens (Darcet et al. 2024: extra tokens that take part in attention and are dropped at the output), then the
patches. Lesson 9's pre-norm blocks (attn.TransformerBlock over lesson 6's MultiHeadAttention) read the whole
sequence with no causal mask: every token sees every other. A final LayerNorm, and a linear head on the class token.

Positions: ``positions="learned"`` adds a learned vector per patch (ViT, DINOv2; at another grid the table is
resized by bicubic interpolation, as ViT does); ``"rotary_2d"`` turns the patches' queries and keys in every layer
by their row and column (attn.vision.apply_rotary_2d; DINOv3), and the class token and registers are not turned.
Rows and columns count patches (``grid_coordinates="index"``), or are DINOv3's patch centres in [-1, 1] times 2 pi
(``"dinov3"``, a grid of any size spanning the same range).

``from_transformers`` copies ViTModel / ViTForImageClassification, Dinov2WithRegistersModel and DINOv3ViTModel. Their
layer scale (a learned per-feature factor on each branch's output) is folded into the output projection and the
MLP's second layer, which it multiplies; ViT's and DINOv2's position vector for the class token is folded into the
class token, which it is added to.
"""

import torch
from torch import nn
from torch.nn import functional

from attn.block import TransformerBlock
from attn.common.sizes import check_allocation
from attn.common.validate import positive_int, require_choice, require_like, require_module, whole_number
from attn.multihead import _explicit_attention, _fused_attention, _merge_heads, _split_heads
from attn.vision import _turn_pairs, check_images, dinov3_coordinates, grid_positions, patches, rotary_2d_frequencies

POSITIONS = ("learned", "rotary_2d")
GRID_COORDINATES = ("index", "dinov3")
MAX_GRID = 256  # patches per side: far more than any picture here (a 7 x 7 grid reads Fashion-MNIST)


def _check_sizes(image_size, patch_size, embed_dim, num_heads, num_layers, num_classes, registers, channels, mlp_ratio):
    """The constructor's sizes, each a sentence if wrong; returns them as ints."""
    image_size, patch_size = positive_int("image_size", image_size), positive_int("patch_size", patch_size)
    if image_size % patch_size:
        raise ValueError(f"a patch of {patch_size} x {patch_size} pixels does not divide an image of {image_size} x "
                         f"{image_size}: choose a patch size that divides the image size")
    if image_size // patch_size > MAX_GRID:
        raise ValueError(f"{image_size // patch_size} patches per side is far more than this course reads; "
                         f"use at most {MAX_GRID}")
    embed_dim, num_heads = positive_int("embed_dim", embed_dim), positive_int("num_heads", num_heads)
    num_layers = whole_number("num_layers", num_layers, minimum=1, maximum=1_000)
    num_classes = whole_number("num_classes", num_classes, minimum=0, maximum=1_000_000)
    registers = whole_number("registers", registers, minimum=0, maximum=1_024)
    channels = whole_number("channels", channels, minimum=1, maximum=64)
    if isinstance(mlp_ratio, bool) or not isinstance(mlp_ratio, int | float):
        raise TypeError(f"mlp_ratio must be a positive number, got {type(mlp_ratio).__name__} {mlp_ratio!r:.40}")
    if not 0 < mlp_ratio <= 64:
        raise ValueError(f"mlp_ratio must be a number above 0 and at most 64 (the usual is 4), got {mlp_ratio!r}")
    per_layer = (4 + 2 * mlp_ratio) * embed_dim * embed_dim  # attention's four matrices and the MLP's two
    total = num_layers * per_layer + (channels * patch_size**2 + num_classes + registers + 1 +
                                      (image_size // patch_size) ** 2) * embed_dim
    check_allocation(f"a VisionTransformer of {num_layers} layers of width {embed_dim}", 4 * total,
                     advice="use a smaller embed_dim or fewer layers")
    return image_size, patch_size, embed_dim, num_heads, num_layers, num_classes, registers, channels


class VisionTransformer(nn.Module):
    """A Vision Transformer for pictures (B, C, H, W) -> class logits (B, num_classes).

    VisionTransformer(image_size, patch_size, embed_dim, num_heads, num_layers, num_classes, positions='learned',
    registers=0, channels=1, mlp_ratio=4, rotary_base=100.0, grid_coordinates='index'): square pictures of
    image_size pixels (the learned positions' grid; other sizes that the patch divides are read too), patch_size p,
    embed_dim E = num_heads * d, positions 'learned' or 'rotary_2d' (d a multiple of 4), registers R >= 0.
    num_classes = 0: no head, and forward returns the class token's final features (B, E).

    forward(images (B, C, H, W), need_weights=False) -> logits (B, num_classes); with need_weights, also the
    attention weights of every layer, (num_layers, B, H, T, T) with T = 1 + R + N (class token, registers,
    patches). ``features`` gives the final tokens with the registers dropped; ``residual_stream`` every layer's.
    """

    def __init__(self, image_size, patch_size, embed_dim, num_heads, num_layers, num_classes, positions="learned",
                 registers=0, channels=1, mlp_ratio=4, rotary_base=100.0, grid_coordinates="index"):
        super().__init__()
        sizes = _check_sizes(image_size, patch_size, embed_dim, num_heads, num_layers, num_classes, registers, channels,
                             mlp_ratio)
        image_size, patch_size, embed_dim, num_heads, num_layers, num_classes, registers, channels = sizes
        self.positions = require_choice("positions", positions, POSITIONS)
        self.grid_coordinates = require_choice("grid_coordinates", grid_coordinates, GRID_COORDINATES)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} cannot be split into {num_heads} equal heads")
        head_dim = embed_dim // num_heads
        self.frequencies = None
        if positions == "rotary_2d":
            self.frequencies = rotary_2d_frequencies(head_dim, rotary_base)  # (d/4,) float64; checks d % 4 and base
        self.image_size, self.patch_size, self.channels = image_size, patch_size, channels
        self.embed_dim, self.num_heads, self.registers, self.num_classes = embed_dim, num_heads, registers, num_classes
        self.grid = image_size // patch_size  # patches per side at image_size
        self.patch_embedding = nn.Linear(channels * patch_size**2, embed_dim)  # a p x p convolution, as a matrix
        self.class_token = nn.Parameter(torch.randn(1, 1, embed_dim) * 0.02)
        self.register_tokens = nn.Parameter(torch.randn(1, registers, embed_dim) * 0.02) if registers else None
        self.position_embedding = (nn.Parameter(torch.randn(1, self.grid**2, embed_dim) * 0.02)
                                   if positions == "learned" else None)
        self.blocks = nn.ModuleList(TransformerBlock(embed_dim, num_heads, mlp_ratio=mlp_ratio) for _ in range(num_layers))
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes else None

    # --- the doors -----------------------------------------------------------------------------------------------

    def forward(self, images, need_weights=False):
        """images (B, C, H, W) -> logits (B, num_classes) (or the class token's features (B, E) without a head);
        with need_weights=True, (logits, weights (num_layers, B, H, T, T))."""
        if not isinstance(need_weights, bool):
            raise TypeError(f"need_weights must be True or False, got {type(need_weights).__name__}")
        states, weights = self._run(images, need_weights)
        cls = self.norm(states[-1][:, 0])  # (B, E): the class token after the final norm
        logits = self.head(cls) if self.head is not None else cls
        return (logits, torch.stack(weights)) if need_weights else logits

    def features(self, images):
        """The final tokens after the last norm, registers dropped: (B, 1 + N, E), the class token first."""
        states, _ = self._run(images, False)
        final = self.norm(states[-1])
        return torch.cat([final[:, :1], final[:, 1 + self.registers:]], dim=1)

    def residual_stream(self, images):
        """The residual stream before the first block and after each: (num_layers + 1, B, T, E), T = 1 + R + N, registers
        kept (lessons 16 and 22 read the norm of each token here)."""
        states, _ = self._run(images, False)
        return torch.stack(states)

    # --- inside ----------------------------------------------------------------------------------------------------

    def _check(self, images):
        check_images(images, self.patch_size)
        require_like("images", images, self.patch_embedding.weight)
        if images.shape[1] != self.channels:
            raise ValueError(f"images have {images.shape[1]} channels but the model reads {self.channels} "
                             f"(images of shape (B, C, H, W) with C = {self.channels})")
        grid_height, grid_width = images.shape[-2] // self.patch_size, images.shape[-1] // self.patch_size
        if max(grid_height, grid_width) > MAX_GRID:
            raise ValueError(f"images of {tuple(images.shape[-2:])} pixels make a grid of {grid_height} x {grid_width} "
                             f"patches, more than the {MAX_GRID} per side this model reads")
        tokens = 1 + self.registers + grid_height * grid_width
        check_allocation(f"attention over {tokens:,} tokens", 4 * images.shape[0] * self.num_heads * tokens**2,
                         images.device, advice="read fewer or smaller pictures at once")
        return grid_height, grid_width

    def _run(self, images, need_weights):
        """The residual stream after the embedding and after each block (a list of (B, T, E)), and each block's
        attention weights (a list of (B, H, T, T)) when asked for."""
        grid_height, grid_width = self._check(images)
        batch = images.shape[0]
        tokens = self.patch_embedding(patches(images, self.patch_size))  # (B, N, E)
        if self.position_embedding is not None:
            tokens = tokens + self._position_table(grid_height, grid_width)
        prefix = [self.class_token.expand(batch, -1, -1)]
        if self.register_tokens is not None:
            prefix.append(self.register_tokens.expand(batch, -1, -1))
        x = torch.cat([*prefix, tokens], dim=1)  # (B, T, E): class token, registers, patches
        angles = self._angles(grid_height, grid_width, x) if self.frequencies is not None else None
        states, weights = [x], []
        for block in self.blocks:
            x, block_weights = self._block(block, x, angles, need_weights)
            states.append(x)
            weights.append(block_weights)
        return states, weights

    def _position_table(self, grid_height, grid_width):
        """The learned positions (1, N, E) for a grid of grid_height x grid_width patches (bicubic if resized)."""
        if (grid_height, grid_width) == (self.grid, self.grid):
            return self.position_embedding
        table = self.position_embedding.reshape(1, self.grid, self.grid, self.embed_dim).permute(0, 3, 1, 2)
        resized = functional.interpolate(table, size=(grid_height, grid_width), mode="bicubic", align_corners=False)
        return resized.permute(0, 2, 3, 1).reshape(1, grid_height * grid_width, self.embed_dim)

    def _angles(self, grid_height, grid_width, x):
        """The angle of each patch's pairs (N, d/2): its row times the frequencies, then its column times them."""
        if self.grid_coordinates == "dinov3":
            rows, cols = dinov3_coordinates(grid_height, grid_width)
            rows, cols, frequencies = rows.float(), cols.float(), self.frequencies.float()  # DINOv3 turns in float32
        else:
            rows, cols = grid_positions(grid_height, grid_width)
            frequencies = self.frequencies
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        angles = torch.cat([rows[:, None] * frequencies, cols[:, None] * frequencies], dim=-1)
        return angles.to(device=x.device, dtype=compute)

    def _block(self, block, x, angles, need_weights):
        """One pre-norm block; with 2D rotary, lesson 6's attention written out so that the patches' queries and keys
        turn between the projections and the scores. Returns x (B, T, E) and the weights (or None)."""
        if angles is None:
            out = block(x, need_weights=need_weights)
            return out if need_weights else (out, None)
        attention, heads = block.attention, block.attention.num_heads
        normed = block.norm1(x)
        q = _split_heads(attention.query_proj(normed), heads)  # (B, H, T, d)
        k = _split_heads(attention.key_proj(normed), heads)
        v = _split_heads(attention.value_proj(normed), heads)
        first = 1 + self.registers  # the class token and registers have no place on the grid: not turned
        q = torch.cat([q[:, :, :first], _turn_pairs(q[:, :, first:].to(angles.dtype), angles).to(q.dtype)], dim=2)
        k = torch.cat([k[:, :, :first], _turn_pairs(k[:, :, first:].to(angles.dtype), angles).to(k.dtype)], dim=2)
        if need_weights:
            mixed, weights = _explicit_attention(q, k, v, None, 0.0, False)
        else:
            mixed, weights = _fused_attention(q, k, v, None, 0.0, False), None
        x = x + attention.out_proj(_merge_heads(mixed))
        x = x + block.mlp(block.norm2(x))
        return x, weights

    # --- transformers ----------------------------------------------------------------------------------------------

    @classmethod
    def from_transformers(cls, model):
        """The course's copy of a transformers ViTModel, ViTForImageClassification, Dinov2WithRegistersModel or
        DINOv3ViTModel (weights, norms' eps, dtype), in eval mode. A model the course's layers cannot express (another
        activation, a gated or SwiGLU MLP, rectangular images or patches) gets a sentence. ViTModel's pooler (a tanh
        layer on the class token) is not copied: compare its last_hidden_state with ``features``. Their outputs hold
        the registers after the class token; ``features`` drops them."""
        require_module("model", model, "a transformers ViTModel, ViTForImageClassification, Dinov2WithRegistersModel or "
                       "DINOv3ViTModel")
        readers = {"ViTModel": _vit_parts, "ViTForImageClassification": _vit_parts,
                   "Dinov2WithRegistersModel": _dinov2_parts, "DINOv3ViTModel": _dinov3_parts}
        reader = readers.get(type(model).__name__)
        if reader is None:
            raise TypeError(f"model must be one of {', '.join(readers)} from transformers, got {type(model).__name__}")
        arguments, parts = reader(model)
        parameter = next(model.parameters())
        ours = cls(**arguments).to(dtype=parameter.dtype, device=parameter.device)
        with torch.no_grad():
            _copy(ours, parts, arguments["num_heads"])
        return ours.eval()


# --- reading transformers' models ----------------------------------------------------------------------------------


def _common_arguments(config, num_classes):
    """The constructor's arguments from a transformers vision config, or a sentence for what the course cannot express."""
    for name in ("image_size", "patch_size"):
        if not isinstance(getattr(config, name), int):
            raise ValueError(f"config.{name} is {getattr(config, name)!r}; the course's ViT reads square pictures and "
                             "square patches, one whole number each")
    if config.hidden_act != "gelu":
        raise ValueError(f"config.hidden_act is {config.hidden_act!r}; the course's blocks use 'gelu' (or 'relu')")
    return {"image_size": config.image_size, "patch_size": config.patch_size, "embed_dim": config.hidden_size,
            "num_heads": config.num_attention_heads, "num_layers": config.num_hidden_layers, "num_classes": num_classes,
            "channels": config.num_channels}


def _mlp_ratio(hidden, embed_dim):
    return hidden // embed_dim if hidden % embed_dim == 0 else hidden / embed_dim


def _vit_parts(model):
    """ViTModel or ViTForImageClassification: learned positions (the class token's own folded into it), no registers."""
    head = getattr(model, "classifier", None)
    vit = model.vit if head is not None else model
    config = model.config
    arguments = _common_arguments(config, head.out_features if head is not None else 0)
    arguments["mlp_ratio"] = _mlp_ratio(config.intermediate_size, config.hidden_size)
    embeddings = vit.embeddings
    layers = [{"norm1": layer.layernorm_before, "attention": layer.attention, "norm2": layer.layernorm_after,
               "fc1": layer.mlp.fc1, "fc2": layer.mlp.fc2} for layer in vit.layers]
    return arguments, {"cls": embeddings.cls_token, "positions": embeddings.position_embeddings, "registers": None,
                       "patch": embeddings.patch_embeddings.projection, "layers": layers, "norm": vit.layernorm,
                       "head": head, "eps": config.layer_norm_eps, "rotate_half": False}


def _dinov2_parts(model):
    """Dinov2WithRegistersModel: learned positions, registers after the class token, layer scale."""
    config = model.config
    if config.use_swiglu_ffn:
        raise ValueError("config.use_swiglu_ffn is True; the course's ViT blocks have a plain GELU MLP")
    arguments = _common_arguments(config, 0)
    arguments.update(mlp_ratio=config.mlp_ratio, registers=config.num_register_tokens)
    embeddings = model.embeddings
    layers = [{"norm1": layer.norm1, "attention": layer.attention, "scale1": layer.layer_scale1.lambda1,
               "norm2": layer.norm2, "fc1": layer.mlp.fc1, "fc2": layer.mlp.fc2, "scale2": layer.layer_scale2.lambda1}
              for layer in model.encoder.layer]
    return arguments, {"cls": embeddings.cls_token, "positions": embeddings.position_embeddings,
                       "registers": embeddings.register_tokens, "patch": embeddings.patch_embeddings.projection,
                       "layers": layers, "norm": model.layernorm, "head": None, "eps": config.layer_norm_eps,
                       "rotate_half": False}


def _dinov3_parts(model):
    """DINOv3ViTModel: 2D rotary on DINOv3's patch centres, registers, layer scale, no key bias."""
    config = model.config
    if config.use_gated_mlp:
        raise ValueError("config.use_gated_mlp is True; the course's ViT blocks have a plain GELU MLP")
    arguments = _common_arguments(config, 0)
    arguments.update(mlp_ratio=_mlp_ratio(config.intermediate_size, config.hidden_size),
                     registers=config.num_register_tokens, positions="rotary_2d", rotary_base=config.rope_theta,
                     grid_coordinates="dinov3")
    layers = [{"norm1": layer.norm1, "attention": layer.attention, "scale1": layer.layer_scale1.lambda1,
               "norm2": layer.norm2, "fc1": layer.mlp.up_proj, "fc2": layer.mlp.down_proj,
               "scale2": layer.layer_scale2.lambda1} for layer in model.model.layer]
    embeddings = model.embeddings
    return arguments, {"cls": embeddings.cls_token, "positions": None, "registers": embeddings.register_tokens,
                       "patch": embeddings.patch_embeddings, "layers": layers, "norm": model.norm, "head": None,
                       "eps": config.layer_norm_eps, "rotate_half": True}


def _copy_linear(ours, weight, bias, scale=None):
    """ours.weight = diag(scale) weight and ours.bias = scale * bias (zeros where theirs has none)."""
    scale = torch.ones(weight.shape[0], dtype=weight.dtype, device=weight.device) if scale is None else scale
    ours.weight.copy_(scale[:, None] * weight)
    ours.bias.copy_(scale * bias if bias is not None else torch.zeros_like(ours.bias))


def _copy(ours, parts, num_heads):
    """Every weight of ``parts`` (read by _vit_parts and its kin) into the course's model ``ours``."""
    from attn.models.llama import rotate_half_to_pairs

    patch = parts["patch"]
    ours.patch_embedding.weight.copy_(patch.weight.reshape(patch.weight.shape[0], -1))  # (E, C, p, p) -> (E, C p p)
    ours.patch_embedding.bias.copy_(patch.bias)
    cls = parts["cls"]
    if parts["positions"] is not None:
        cls = cls + parts["positions"][:, :1]  # the class token's position vector, always added to it
        ours.position_embedding.copy_(parts["positions"][:, 1:])
    ours.class_token.copy_(cls)
    if parts["registers"] is not None and ours.register_tokens is not None:
        ours.register_tokens.copy_(parts["registers"])
    turn = (lambda w: rotate_half_to_pairs(w, num_heads)) if parts["rotate_half"] else (lambda w: w)
    for block, theirs in zip(ours.blocks, parts["layers"], strict=True):
        attention = theirs["attention"]
        for norm, source in ((block.norm1, theirs["norm1"]), (block.norm2, theirs["norm2"])):
            norm.weight.copy_(source.weight)
            norm.bias.copy_(source.bias)
            norm.eps = parts["eps"]
        for name, mine in (("q_proj", "query_proj"), ("k_proj", "key_proj")):
            source = getattr(attention, name)
            bias = turn(source.bias) if source.bias is not None else None
            _copy_linear(getattr(block.attention, mine), turn(source.weight), bias)
        _copy_linear(block.attention.value_proj, attention.v_proj.weight, attention.v_proj.bias)
        _copy_linear(block.attention.out_proj, attention.o_proj.weight, attention.o_proj.bias, theirs.get("scale1"))
        _copy_linear(block.mlp[0], theirs["fc1"].weight, theirs["fc1"].bias)
        _copy_linear(block.mlp[3], theirs["fc2"].weight, theirs["fc2"].bias, theirs.get("scale2"))
    ours.norm.weight.copy_(parts["norm"].weight)
    ours.norm.bias.copy_(parts["norm"].bias)
    ours.norm.eps = parts["eps"]
    if parts["head"] is not None:
        _copy_linear(ours.head, parts["head"].weight, parts["head"].bias)


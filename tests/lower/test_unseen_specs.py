"""Specs the lowering has never seen, written only within the lowering's numpy subset
(docs/specs.md): each must lower, round-trip, fit in PE memory, and match its float64
reference (native within tolerance, exact to ~1e-9)."""

from __future__ import annotations

import pytest

UNSEEN = {
    "scalar_arith_unary_minus": """
        @spec(inputs={"x": tensor("f32", (64, 96))})
        def f(x):
            return -x * 2.5 + 1.0 - x / 4 + 3 / (x * x + 1.0) - (-x)
        """,
    "row_vector_broadcast": """
        @spec(inputs={"x": tensor("f32", (48, 40)), "b": tensor("f32", (40,))})
        def f(x, b):
            return (x - b) * b + b / (1.0 + b * b)
        """,
    "outer_product_column_times_row": """
        @spec(inputs={"c": tensor("f32", (96, 1)), "r": tensor("f32", (1, 80))})
        def f(c, r):
            return c * r + c - r
        """,
    "rank3_broadcast_middle_axis": """
        @spec(inputs={"x": tensor("f32", (4, 6, 32)), "y": tensor("f32", (4, 1, 32)),
                      "z": tensor("f32", (32,))})
        def f(x, y, z):
            return x * y + z
        """,
    "comparisons_where_neg_inf": """
        @spec(inputs={"x": tensor("f32", (32, 128)), "t": tensor("f32", (32, 1))})
        def f(x, t):
            m = x > t
            y = np.where(m, x, -np.inf)
            z = np.where(x <= -5.0, 0.0, y)
            w = np.where(x == 0.0, 1.0, z)
            return np.where(x >= 9.5, -np.inf, w)
        """,
    "masked_row_max_with_bool_input": """
        @spec(inputs={"x": tensor("f32", (16, 256)), "mask": tensor("bool", (16, 256))})
        def f(x, mask):
            s = np.where(mask, x, -np.inf)
            return s.max(axis=-1)
        """,
    "unary_functions": """
        @spec(inputs={"x": tensor("f32", (40, 50), low=0.1, high=5.0)})
        def f(x):
            return (np.exp(-x) + np.log(x) + np.sqrt(x) + np.tanh(x - 2.0)
                    + np.abs(x - 2.5) + np.maximum(x, 2.0) + np.minimum(x, 1.0))
        """,
    "maximum_minimum_of_tensors": """
        @spec(inputs={"a": tensor("f32", (33, 17)), "b": tensor("f32", (33, 17))})
        def f(a, b):
            return np.maximum(a, b) * 2.0 - np.minimum(a, -b)
        """,
    "reductions_every_axis_form": """
        @spec(inputs={"x": tensor("f32", (8, 12, 20))})
        def f(x):
            a = x.max(axis=-1)                       # (8, 12)
            b = np.sum(x, axis=1)                    # (8, 20)
            c = x.mean(axis=(1, 2), keepdims=True)   # (8, 1, 1)
            d = np.max(x, axis=0, keepdims=False)    # (12, 20)
            return a.sum(axis=1, keepdims=True) + b.mean(axis=-1, keepdims=True) \\
                + c[:, 0, :] + d.sum() * 0.001
        """,
    "full_reduction_axis_none": """
        @spec(inputs={"x": tensor("f32", (24, 40))})
        def f(x):
            return x.mean() + np.max(x, axis=None) + x.sum(axis=None, keepdims=True)
        """,
    "matmul_2d_prime_sizes": """
        @spec(inputs={"a": tensor("f32", (13, 7), low=-2, high=2),
                      "b": tensor("f32", (7, 11), low=-2, high=2)})
        def f(a, b):
            return a @ b
        """,
    "matmul_transposed_operands": """
        @spec(inputs={"a": tensor("bf16", (64, 96), low=-1, high=1),
                      "b": tensor("bf16", (48, 96), low=-1, high=1)})
        def f(a, b):
            return np.matmul(a, b.T) + np.transpose(b @ a.T) * 0.5
        """,
    "batched_matmul_3d": """
        @spec(inputs={"q": tensor("bf16", (4, 16, 32), low=-1, high=1),
                      "k": tensor("bf16", (4, 64, 32), low=-1, high=1),
                      "v": tensor("bf16", (4, 64, 24), low=-1, high=1)})
        def f(q, k, v):
            s = q @ np.transpose(k, (0, 2, 1)) / math.sqrt(32)
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p = p / p.sum(axis=-1, keepdims=True)
            return np.matmul(p, v)
        """,
    "reshape_split_and_merge": """
        @spec(inputs={"x": tensor("f32", (32, 64))})
        def f(x):
            h = x.reshape(32, 4, 16)
            m = h.max(axis=-1, keepdims=True)
            return (h - m).reshape((32, 64)) + x.reshape(-1, 32).reshape(32, 64)
        """,
    "astype_and_mixed_dtypes": """
        @spec(inputs={"x": tensor("bf16", (64, 32), low=-3, high=3),
                      "n": tensor("i32", (64, 32), low=-5, high=5),
                      "m": tensor("bool", (64, 32))},
              output=tensor("bf16", (64, 32)))
        def f(x, n, m):
            y = x.astype(np.float32) * n + m.astype(np.float32)
            return np.where(m, y, n * 0.5)
        """,
    "static_slices": """
        @spec(inputs={"x": tensor("f32", (40, 60))})
        def f(x):
            a = x[:, 10:30] * 2.0                  # a pe value, sliced again below
            return a[2:38] * x[2:38, :20] + x[4:, -20:] - a[-36:, 0:20]
        """,
    "slice_first_axis_1d": """
        @spec(inputs={"x": tensor("f32", (100,))})
        def f(x):
            return x[:50] - x[50:] * 2.0
        """,
    "concatenate_each_axis": """
        @spec(inputs={"a": tensor("f32", (6, 10, 8)), "b": tensor("f32", (6, 10, 8))})
        def f(a, b):
            x = np.concatenate([a, b], axis=0)          # (12, 10, 8)
            y = np.concatenate((a * 2.0, b), axis=1)    # (6, 20, 8)
            z = np.concatenate([a, b - 1.0, a], axis=-1)  # (6, 10, 24)
            return x[:6, :, :].sum(axis=-1) + y[:, 10:, :].max(axis=-1) \\
                + z.mean(axis=-1)
        """,
    "math_constants": """
        @spec(inputs={"x": tensor("f32", (16, 16), low=-1, high=1)})
        def f(x):
            return x * math.pi + math.e - math.sqrt(2.0) / (x * x + math.tau)
        """,
    "one_sized_axes": """
        @spec(inputs={"x": tensor("f32", (1, 37)), "y": tensor("f32", (37, 1)),
                      "z": tensor("f32", (1, 1))})
        def f(x, y, z):
            return (x + y) * z + x.sum(axis=1, keepdims=True)
        """,
    "tiny_1d": """
        @spec(inputs={"x": tensor("f32", (3,)), "y": tensor("f32", (1,))})
        def f(x, y):
            return x * y + x.max()
        """,
    "awkward_sizes_not_dividing_fanouts": """
        @spec(inputs={"x": tensor("f32", (997, 3)), "w": tensor("f32", (3,))})
        def f(x, w):
            return np.tanh(x * w).sum(axis=1, keepdims=True) / 3.0
        """,
    "prime_rows_softmax": """
        @spec(inputs={"x": tensor("f32", (13, 7), low=-20, high=20)})
        def f(x):
            e = np.exp(x - x.max(axis=0, keepdims=True))
            return e / e.sum(axis=0, keepdims=True)
        """,
    "large_elementwise_fits": """
        @spec(inputs={"x": tensor("f32", (2048, 2048)), "y": tensor("f32", (2048, 2048))})
        def f(x, y):
            return np.maximum(x, y) * 0.5 + np.minimum(x, y)
        """,
    "large_matmul_fits": """
        @spec(inputs={"a": tensor("bf16", (1024, 1024), low=-1, high=1),
                      "b": tensor("bf16", (1024, 1024), low=-1, high=1)})
        def f(a, b):
            return a @ b
        """,
    "large_row_reduction": """
        @spec(inputs={"x": tensor("f32", (64, 16384))})
        def f(x):
            return x.max(axis=1) - x.mean(axis=1)
        """,
    "power_and_square": """
        @spec(inputs={"x": tensor("f32", (20, 30), low=0.5, high=2.0)})
        def f(x):
            return x ** 2 + np.square(x) + x ** 3 - x ** 0.5
        """,
    "bool_output_comparison": """
        @spec(inputs={"x": tensor("f32", (32, 32)), "y": tensor("f32", (32, 32))},
              output=tensor("bool", (32, 32)))
        def f(x, y):
            return x > y
        """,
    "matmul_vector_broadcast_bias_relu": """
        @spec(inputs={"x": tensor("f32", (50, 30), low=-1, high=1),
                      "w": tensor("f32", (30, 70), low=-1, high=1),
                      "b": tensor("f32", (70,))})
        def f(x, w, b):
            return np.maximum(x @ w + b, 0.0)
        """,
    "transpose_then_elementwise": """
        @spec(inputs={"x": tensor("f32", (24, 40)), "y": tensor("f32", (40, 24))})
        def f(x, y):
            return x.T * y + np.transpose(y).T
        """,
    "rank3_transpose_reduce": """
        @spec(inputs={"x": tensor("f32", (5, 6, 7))})
        def f(x):
            return np.transpose(x, (2, 0, 1)).sum(axis=0) + x.transpose(1, 0, 2).max(axis=-1).T
        """,
    "layer_of_ops_on_i32": """
        @spec(inputs={"n": tensor("i32", (16, 48), low=0, high=100)})
        def f(n):
            return np.sqrt(n + 1.0) * (n > 50)
        """,
    "vector_matmul_both_sides": """
        @spec(inputs={"v": tensor("f32", (64,)), "w": tensor("f32", (64, 32)),
                      "u": tensor("f32", (32,))})
        def f(v, w, u):
            return (v @ w) * (w @ u).sum() + np.matmul(u, u)
        """,
    "batch_against_one_matrix_and_back": """
        @spec(inputs={"x": tensor("f32", (4, 16, 32)), "w": tensor("f32", (32, 8)),
                      "a": tensor("f32", (16, 16))})
        def f(x, w, a):
            return (x @ w) + a @ (x @ w)
        """,
    "rank4_batched_matmul": """
        @spec(inputs={"q": tensor("f32", (2, 3, 8, 16)), "k": tensor("f32", (2, 3, 16, 8))})
        def f(q, k):
            return q @ k
        """,
    "split_k_matmul_with_a_narrower_last_slice": """
        @spec(inputs={"a": tensor("bf16", (512, 997), low=-1, high=1),
                      "b": tensor("bf16", (997, 512), low=-1, high=1)})
        def f(a, b):
            return a @ b
        """,
    "large_matrix_vector": """
        @spec(inputs={"w": tensor("bf16", (4096, 4096), low=-1, high=1),
                      "v": tensor("bf16", (4096,), low=-1, high=1)})
        def f(w, v):
            return w @ v
        """,
    "attention_many_queries_computed_operands": """
        @spec(inputs={"q": tensor("bf16", (256, 128), low=-1, high=1),
                      "k": tensor("bf16", (2048, 128), low=-1, high=1),
                      "v": tensor("bf16", (2048, 128), low=-1, high=1)})
        def f(q, k, v):
            s = q @ k.T * 0.1
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            return (p / p.sum(axis=-1, keepdims=True)) @ v
        """,
    "two_layer_mlp": """
        @spec(inputs={"x": tensor("bf16", (64, 256), low=-1, high=1),
                      "w1": tensor("bf16", (256, 512), low=-0.1, high=0.1),
                      "w2": tensor("bf16", (512, 128), low=-0.1, high=0.1)})
        def f(x, w1, w2):
            return np.maximum(x @ w1, 0.0) @ w2
        """,
    "gram_and_self_products": """
        @spec(inputs={"x": tensor("f32", (100, 30), low=-1, high=1),
                      "s": tensor("f32", (30, 30), low=-1, high=1)})
        def f(x, s):
            return x.T @ x + s @ s
        """,
    "degenerate_matmuls_k1_m1_n1": """
        @spec(inputs={"a": tensor("f32", (30, 1)), "b": tensor("f32", (1, 20)),
                      "r": tensor("f32", (1, 300)), "c": tensor("f32", (300, 1))})
        def f(a, b, r, c):
            return a @ b + r @ c
        """,
    "integer_indices_and_ellipsis": """
        @spec(inputs={"x": tensor("f32", (4, 8, 16))})
        def f(x):
            return x[1] + x[:, 2, :].sum(axis=0) + x[0, 0] + x[..., 3:11].max(axis=0)[:, :1]
        """,
    "logical_operators_on_masks": """
        @spec(inputs={"x": tensor("f32", (32, 32)), "m": tensor("bool", (32, 32))})
        def f(x, m):
            k = (x > 0) & m | ~(x < -5) & (x != 1.0)
            return np.where(k, x, 0.0) + np.where(np.logical_and(m, x > 2), 1.0, 0.0)
        """,
    "bool_arithmetic_and_counts": """
        @spec(inputs={"a": tensor("bool", (16, 40)), "b": tensor("bool", (16, 40)),
                      "x": tensor("f32", (16, 40))})
        def f(a, b, x):
            n = np.maximum(a.sum(axis=1, keepdims=True), 1)
            both = np.where(a * b, 1.0, 0.0) + np.where(a + b, 2.0, 0.0) + a + b * 3.0
            return both + np.where(a, x, 0.0) / n + (x > 0).mean(axis=1, keepdims=True)
        """,
    "astype_int_truncates_to_i32_output": """
        @spec(inputs={"x": tensor("f32", (20, 20))}, output=tensor("i32", (20, 20)))
        def f(x):
            return (x * 3.0).astype(np.int32) + (x > 0).astype(int)
        """,
    "i32_in_i32_out": """
        @spec(inputs={"n": tensor("i32", (30, 30), low=-100, high=100)},
              output=tensor("i32", (30, 30)))
        def f(n):
            return n * 2 - 7 + np.abs(n)
        """,
    "bf16_output_softmax": """
        @spec(inputs={"x": tensor("bf16", (64, 200))}, output=tensor("bf16", (64, 200)))
        def f(x):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        """,
    "masked_log_softmax_with_empty_rows": """
        @spec(inputs={"x": tensor("f32", (8, 40)), "m": tensor("bool", (8, 40))})
        def f(x, m):
            s = np.where(m, x, -np.inf)
            e = np.exp(s - s.max(axis=1, keepdims=True))
            return s - np.log(e.sum(axis=1, keepdims=True))
        """,
    "softmax_over_axis0_of_a_wide_matrix": """
        @spec(inputs={"x": tensor("f32", (7, 4096))})
        def f(x):
            e = np.exp(x - x.max(axis=0))
            return e / e.sum(axis=0)
        """,
    "rank4_mean_over_tuple_axes": """
        @spec(inputs={"x": tensor("f32", (2, 3, 4, 5))})
        def f(x):
            return x - x.mean(axis=(1, 3), keepdims=True)
        """,
    "outer_product_via_reshape": """
        @spec(inputs={"a": tensor("f32", (50,)), "b": tensor("f32", (70,))})
        def f(a, b):
            return a.reshape(-1, 1) * b.reshape(1, -1)
        """,
    "concat_rows_of_different_counts_and_1d": """
        @spec(inputs={"a": tensor("f32", (10, 16)), "b": tensor("f32", (6, 16)),
                      "v": tensor("f32", (5,))})
        def f(a, b, v):
            rows = np.concatenate([a * 2, b, a[:3]], axis=0)          # (19, 16)
            flat = np.concatenate([v, v[2:4] * 2, a[0]])              # (23,)
            return rows.sum(axis=0)[:7] + np.concatenate((v, v), axis=None)[3:10] + flat[:7]
        """,
    "reshape_of_a_transposed_value": """
        @spec(inputs={"x": tensor("f32", (16, 32))})
        def f(x):
            return np.exp(x * 0.1).T.reshape(32, 4, 4).sum(axis=-1)
        """,
    "where_with_broadcast_condition": """
        @spec(inputs={"c": tensor("f32", (20, 1)), "x": tensor("f32", (1, 30))})
        def f(c, x):
            return np.where(c > 0, x, -x) + np.where(c > x, c, 0.5) + np.where(c, 1.0, 2.0)
        """,
    "negative_and_half_powers_and_clip": """
        @spec(inputs={"x": tensor("f32", (20, 30), low=0.5, high=2.0)})
        def f(x):
            return x ** -2 + x ** -0.5 + np.power(x, 3) + np.clip(x, 0.75, 1.5)
        """,
    "full_reductions_of_1d_and_2d": """
        @spec(inputs={"v": tensor("f32", (1000,)), "x": tensor("f32", (16, 8))})
        def f(v, x):
            return v / np.sqrt((v * v).sum() + 1e-6) + np.sum(x, axis=(0, 1)) + x.T.max()
        """,
    "batched_matmul_with_long_contraction": """
        @spec(inputs={"q": tensor("bf16", (8, 64, 2048), low=-1, high=1),
                      "k": tensor("bf16", (8, 2048, 64), low=-1, high=1)})
        def f(q, k):
            return q @ k
        """,
    "i32_and_bf16_operands_of_a_matmul": """
        @spec(inputs={"a": tensor("i32", (16, 24), low=-3, high=3),
                      "b": tensor("bf16", (24, 8), low=-1, high=1)})
        def f(a, b):
            return a @ b
        """,
}


# the large specs take seconds each to emulate against their reference: slow
LARGE = {"large_elementwise_fits", "large_matrix_vector", "large_matmul_fits"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in LARGE
                                  else n for n in sorted(UNSEEN)])
def test_unseen_spec_lowers_fits_and_matches(name, load, checked):
    spec = load(UNSEEN[name])
    checked(spec)

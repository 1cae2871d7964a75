"""Small in-place dense linear algebra for the kernels (no allocation).

numpy.linalg inside numba allocates on every call; these routines work on the
top-left ``n`` x ``n`` block of caller-owned arrays instead.
"""
import numpy as np
from hilrig.jit.kernel import inline_kernel, kernel, sized_kernel


@inline_kernel
def sym3_solve(a11, a12, a13, a22, a23, a33, y1, y2, y3):
    """Solve the symmetric 3 x 3 system A x = y in scalars, by its adjugate.

    For the fused per-step kernels (registers, no arrays). x = adj(A) y / det A:
    the cofactors and det A need no division and one reciprocal follows, so the
    chain from A to x is about half as long as an LDL^T solve's, whose three
    divisions depend on each other (the fused RK4 steps wait on it at every
    stage). Returns (x1, x2, x3, m1, m2, m3) with A's leading principal minors
    a11, a11 a22 - a12^2 and det A: the caller judges the system's regularity
    from them (x is invalid unless all are positive; A's LDL^T pivots are m1,
    m2 / m1 and m3 / m2).
    """
    c11 = a22 * a33 - a23 * a23
    c12 = a13 * a23 - a12 * a33
    c13 = a12 * a23 - a13 * a22
    c22 = a11 * a33 - a13 * a13
    c23 = a12 * a13 - a11 * a23
    c33 = a11 * a22 - a12 * a12
    det = a11 * c11 + a12 * c12 + a13 * c13
    inv = 1.0 / det
    x1 = (c11 * y1 + c12 * y2 + c13 * y3) * inv
    x2 = (c12 * y1 + c22 * y2 + c23 * y3) * inv
    x3 = (c13 * y1 + c23 * y2 + c33 * y3) * inv
    return x1, x2, x3, a11, c33, det


@sized_kernel("n")   # n: a size, its loops unrolled for a constant
def cholesky_solve(a, b, n):
    """Solve A x = b for symmetric positive definite A, in place (LDL^T, no square roots).

    A (n x n, top-left block of ``a``) is overwritten by its factors (unit lower
    triangle L below the diagonal, D on it), ``b[:n]`` by the solution. Returns
    the smallest pivot D_jj (<= 0: A not positive definite, solution invalid).
    """
    min_pivot = np.inf
    for j in range(n):
        d = a[j, j]
        for k in range(j):
            d -= a[j, k] * a[j, k] * a[k, k]
        if d < min_pivot:
            min_pivot = d
        if d <= 0.0:
            return d
        a[j, j] = d
        inv = 1.0 / d
        for i in range(j + 1, n):
            s = a[i, j]
            for k in range(j):
                s -= a[i, k] * a[j, k] * a[k, k]
            a[i, j] = s * inv
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= a[i, k] * b[k]
        b[i] = s
    for i in range(n - 1, -1, -1):
        s = b[i] / a[i, i]
        for k in range(i + 1, n):
            s -= a[k, i] * b[k]
        b[i] = s
    return min_pivot


@kernel
def chain_solve(a, b, n):
    """cholesky_solve for a chain's mass matrix: its loops unrolled for the common arms'
    sizes (6 and 7 joints: the UR5, the Kinova, the Panda; 7 measured 134 -> 97 ns a
    solve), the generic loops for any other n. The same operations in the same order:
    the same result, bit for bit."""
    if n == 7:
        return cholesky_solve(a, b, 7)
    if n == 6:
        return cholesky_solve(a, b, 6)
    return cholesky_solve(a, b, n)


@sized_kernel("n")   # n: a size, its loops unrolled for a constant
def symmetric_eigen(a, vecs, vals, n):
    """Eigen-decomposition of a small symmetric matrix by cyclic Jacobi rotations.

    ``a`` (n x n block) is destroyed; ``vecs`` receives the eigenvectors as
    columns, ``vals[:n]`` the eigenvalues.
    """
    for i in range(n):
        for j in range(n):
            vecs[i, j] = 1.0 if i == j else 0.0
    for _sweep in range(50):
        off = 0.0
        for i in range(n):
            for j in range(i + 1, n):
                off += a[i, j] * a[i, j]
        if off < 1e-300:
            break
        for p in range(n):
            for q in range(p + 1, n):
                if a[p, q] == 0.0:
                    continue
                theta = (a[q, q] - a[p, p]) / (2.0 * a[p, q])
                t = np.sign(theta) / (abs(theta) + np.sqrt(theta * theta + 1.0))
                if theta == 0.0:
                    t = 1.0
                c = 1.0 / np.sqrt(t * t + 1.0)
                s = t * c
                for k in range(n):
                    akp = a[k, p]
                    akq = a[k, q]
                    a[k, p] = c * akp - s * akq
                    a[k, q] = s * akp + c * akq
                for k in range(n):
                    apk = a[p, k]
                    aqk = a[q, k]
                    a[p, k] = c * apk - s * aqk
                    a[q, k] = s * apk + c * aqk
                for k in range(n):
                    vkp = vecs[k, p]
                    vkq = vecs[k, q]
                    vecs[k, p] = c * vkp - s * vkq
                    vecs[k, q] = s * vkp + c * vkq
    for i in range(n):
        vals[i] = a[i, i]


@sized_kernel("n")   # n: a size, its loops unrolled for a constant
def spd_solve_robust(a, b, n, tmp, rel_tol):
    """Solve A x = b for symmetric positive semi-definite A, in place in ``b``.

    Tries Cholesky first; if a pivot falls below ``rel_tol`` times the largest
    diagonal entry (A numerically singular), it returns the minimum-norm
    least-squares solution through a truncated eigen-decomposition
    (pseudo-inverse). ``tmp`` is 2-D with at least 2 n + 2 rows and n columns.
    Returns the rank used (n when Cholesky succeeded).
    """
    keep = tmp[:n, :n]
    vecs = tmp[n:2 * n, :n]
    bkeep = tmp[2 * n, :n]
    vals = tmp[2 * n + 1, :n]
    scale = 0.0
    for i in range(n):
        bkeep[i] = b[i]
        if a[i, i] > scale:
            scale = a[i, i]
        for j in range(n):
            keep[i, j] = a[i, j]
    if scale <= 0.0:
        for i in range(n):
            b[i] = 0.0
        return 0
    pivot = cholesky_solve(a, b, n)
    if pivot > rel_tol * scale:
        return n
    symmetric_eigen(keep, vecs, vals, n)
    rank = 0
    for i in range(n):
        b[i] = 0.0
    for k in range(n):
        if vals[k] > rel_tol * scale:
            rank += 1
            proj = 0.0
            for i in range(n):
                proj += vecs[i, k] * bkeep[i]
            proj /= vals[k]
            for i in range(n):
                b[i] += proj * vecs[i, k]
    return rank


@kernel
def nan_sign(value):
    """np.sign of a float: 1, -1, 0, or NaN for a NaN."""
    if value > 0.0:
        return 1.0
    if value < 0.0:
        return -1.0
    return value if value != value else 0.0


@kernel
def nan_max(a, b):
    """max(a, b); NaN if either is NaN (two comparisons, no branch)."""
    return a if (b <= a or a != a) else b

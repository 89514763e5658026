/** The few dense-matrix operations a 3-state, 2-observation filter needs. */
export type Matrix = number[][];

export function zeros(rows: number, cols: number): Matrix {
  return Array.from({ length: rows }, () => new Array<number>(cols).fill(0));
}

export function diag(values: readonly number[]): Matrix {
  const m = zeros(values.length, values.length);
  values.forEach((v, i) => {
    m[i]![i] = v;
  });
  return m;
}

export function identity(n: number): Matrix {
  return diag(new Array<number>(n).fill(1));
}

export function transpose(a: Matrix): Matrix {
  const rows = a.length;
  const cols = a[0]?.length ?? 0;
  const t = zeros(cols, rows);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) t[j]![i] = a[i]![j]!;
  return t;
}

export function multiply(a: Matrix, b: Matrix): Matrix {
  const rows = a.length;
  const inner = b.length;
  const cols = b[0]?.length ?? 0;
  const out = zeros(rows, cols);
  for (let i = 0; i < rows; i++) {
    for (let k = 0; k < inner; k++) {
      const aik = a[i]![k]!;
      if (aik === 0) continue;
      for (let j = 0; j < cols; j++) out[i]![j]! += aik * b[k]![j]!;
    }
  }
  return out;
}

export function add(a: Matrix, b: Matrix): Matrix {
  return a.map((row, i) => row.map((v, j) => v + b[i]![j]!));
}

export function subtract(a: Matrix, b: Matrix): Matrix {
  return a.map((row, i) => row.map((v, j) => v - b[i]![j]!));
}

/** Inverse of a 2x2 matrix; throws when singular. */
export function inverse2(m: Matrix): Matrix {
  const [[a, b], [c, d]] = m as [[number, number], [number, number]];
  const det = a * d - b * c;
  if (!Number.isFinite(det) || Math.abs(det) < 1e-300) throw new Error('singular 2x2 matrix');
  return [
    [d / det, -b / det],
    [-c / det, a / det],
  ];
}

export function column(values: readonly number[]): Matrix {
  return values.map((v) => [v]);
}

/** Inverse of a small symmetric positive-definite matrix (Cholesky); throws when not SPD. */
export function inverseSpd(m: Matrix): Matrix {
  const n = m.length;
  const L = zeros(n, n);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j <= i; j++) {
      let sum = m[i]![j]!;
      for (let k = 0; k < j; k++) sum -= L[i]![k]! * L[j]![k]!;
      if (i === j) {
        if (!(sum > 0)) throw new Error('matrix is not positive definite');
        L[i]![i] = Math.sqrt(sum);
      } else {
        L[i]![j] = sum / L[j]![j]!;
      }
    }
  }
  // inv(L) by forward substitution, then inv(m) = inv(L)' inv(L).
  const Li = zeros(n, n);
  for (let i = 0; i < n; i++) {
    Li[i]![i] = 1 / L[i]![i]!;
    for (let j = 0; j < i; j++) {
      let sum = 0;
      for (let k = j; k < i; k++) sum += L[i]![k]! * Li[k]![j]!;
      Li[i]![j] = -sum / L[i]![i]!;
    }
  }
  return multiply(transpose(Li), Li);
}

/** (a + a') / 2: removes rounding asymmetry from a covariance. */
export function symmetrize(a: Matrix): Matrix {
  return a.map((row, i) => row.map((v, j) => (v + a[j]![i]!) / 2));
}

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

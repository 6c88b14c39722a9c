// A line diff (longest common subsequence) for "what will this save change". Character
// files are small; past 3,000 lines a side, the whole file shows as replaced.

export function diffLines(before, after) {
  const a = before.split('\n');
  const b = after.split('\n');
  if (a.length > 3000 || b.length > 3000) {
    return [...a.map((t) => ({ op: 'del', text: t })), ...b.map((t) => ({ op: 'add', text: t }))];
  }
  const n = a.length, m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) {
    lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  }
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push({ op: 'same', text: a[i] }); i++; j++; }
    else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push({ op: 'del', text: a[i++] });
    else out.push({ op: 'add', text: b[j++] });
  }
  while (i < n) out.push({ op: 'del', text: a[i++] });
  while (j < m) out.push({ op: 'add', text: b[j++] });
  return out;
}

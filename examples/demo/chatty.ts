// Writes to stdout and stderr (stored in the job's logs) and returns how many lines it wrote.
export function main(input: { lines?: number }): { lines: number } {
  const n = input.lines ?? 3;
  for (let i = 1; i <= n; i++) {
    if (i % 2 === 0) {
      console.error(`chatty: line ${i} of ${n} (stderr)`);
    } else {
      console.log(`chatty: line ${i} of ${n} (stdout)`);
    }
  }
  return { lines: n };
}

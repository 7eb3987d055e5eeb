// Add two numbers.
export function main(input: { a: number; b: number }): { sum: number } {
  return { sum: input.a + input.b };
}

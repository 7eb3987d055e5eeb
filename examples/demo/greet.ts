// Say hello. The input was validated against greet.input.json at enqueue.
export function main(input: { name: string }): { greeting: string } {
  return { greeting: `Hello, ${input.name}!` };
}

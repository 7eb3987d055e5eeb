// Waits input.ms milliseconds: useful to watch a running job, cancel it, or trip its timeout.
export async function main(input: { ms: number }): Promise<{ slept: number }> {
  await new Promise((resolve) => setTimeout(resolve, input.ms));
  return { slept: input.ms };
}

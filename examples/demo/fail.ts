// Always fails: the job completes as failure with {name, message, stack}.
export function main(): never {
  throw new Error("this action always fails");
}

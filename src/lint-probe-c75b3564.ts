async function write(): Promise<void> {
  throw new Error("disk full");
}
export function save(): void {
  write();
}

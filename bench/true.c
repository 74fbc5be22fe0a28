/* The smallest dynamic program: what process start-up costs, with or without LD_PRELOAD.
 * Dynamic on purpose: a static binary ignores LD_PRELOAD. */
int main(void) { return 0; }

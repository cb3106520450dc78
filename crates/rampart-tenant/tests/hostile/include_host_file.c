// expect: refused: only #include
/* Pulling a host file into the build (its lines would come back in the
 * compiler's diagnostics), hidden behind a comment before the directive. */
/**/#include "/etc/shadow"
int tenant_main(void *ctx) { return 2; }

/*
 * make asan (util/asan.sh) links this into its own nginx: dlclose() does
 * nothing, so that a dynamic module stays mapped until the process ends.
 * LeakSanitizer checks at exit, after nginx has unloaded its modules;
 * without this it could not name the module's functions in a report, and
 * what only the module's static variables point to would look leaked.
 */

int dlclose(void *handle);


int
dlclose(void *handle)
{
    (void) handle;

    return 0;
}

/*
 * The yardstick of the upload benchmark (util/bench-images.sh): CLIENTS
 * processes insert the bytes of FILE into TABLE (one bytea column) as a
 * binary parameter, one autocommitted INSERT after another, for SECONDS;
 * prints "<inserts> <seconds>".  This is PostgreSQL alone taking the
 * same bytes over the same kind of connection, with blocking libpq,
 * which is fine outside nginx.
 *
 *     pg-insert CONNINFO FILE CLIENTS SECONDS TABLE [read]
 *
 * With "read", the yardstick of downloads: each client selects the
 * content of TABLE's one row (FILE's bytes, inserted by the caller) in
 * binary result format, one query after another; prints "<selects>
 * <seconds>".
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>


static double
now(void)
{
    struct timeval  tv;

    gettimeofday(&tv, NULL);

    return tv.tv_sec + tv.tv_usec / 1e6;
}


static long
client(const char *conninfo, const char *body, int len, double end,
    const char *table, int read)
{
    int          format;
    long         n;
    char         sql[256];
    PGconn      *pg;
    PGresult    *res;
    const char  *values[1];

    pg = PQconnectdb(conninfo);
    if (PQstatus(pg) != CONNECTION_OK) {
        fprintf(stderr, "pg-insert: %s", PQerrorMessage(pg));
        return -1;
    }

    if (read) {
        snprintf(sql, sizeof(sql), "SELECT content FROM %s LIMIT 1", table);

    } else {
        snprintf(sql, sizeof(sql), "INSERT INTO %s (content) VALUES ($1)",
                 table);
    }

    values[0] = body;
    format = 1;
    n = 0;

    while (now() < end) {
        res = read ? PQexecParams(pg, sql, 0, NULL, NULL, NULL, NULL, 1)
                   : PQexecParams(pg, sql, 1, NULL, values, &len, &format, 0);

        if (PQresultStatus(res) != (read ? PGRES_TUPLES_OK : PGRES_COMMAND_OK)
            || (read && (PQntuples(res) != 1 || PQgetlength(res, 0, 0) != len)))
        {
            fprintf(stderr, "pg-insert: %s", PQresultErrorMessage(res));
            PQclear(res);
            PQfinish(pg);
            return -1;
        }

        PQclear(res);
        n++;
    }

    PQfinish(pg);

    return n;
}


int
main(int argc, char **argv)
{
    int      i, clients, fds[2], status, failed;
    long     n, total, len;
    char    *body;
    FILE    *f;
    double   start, end, seconds;

    if (argc != 6 && !(argc == 7 && strcmp(argv[6], "read") == 0)) {
        fprintf(stderr, "usage: pg-insert CONNINFO FILE CLIENTS SECONDS "
                        "TABLE [read]\n");
        return 2;
    }

    f = fopen(argv[2], "rb");
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) <= 0) {
        perror(argv[2]);
        return 1;
    }

    rewind(f);

    body = malloc(len);
    if (body == NULL || fread(body, 1, len, f) != (size_t) len) {
        perror(argv[2]);
        return 1;
    }

    fclose(f);

    clients = atoi(argv[3]);
    seconds = atof(argv[4]);

    if (clients < 1 || seconds <= 0 || pipe(fds) != 0) {
        fprintf(stderr, "pg-insert: bad arguments\n");
        return 2;
    }

    start = now();
    end = start + seconds;

    for (i = 0; i < clients; i++) {
        if (fork() == 0) {
            close(fds[0]);
            n = client(argv[1], body, (int) len, end, argv[5], argc == 7);
            if (write(fds[1], &n, sizeof(n)) != sizeof(n)) {
                _exit(1);
            }
            _exit(n < 0);
        }
    }

    close(fds[1]);

    total = 0;
    failed = 0;

    while (read(fds[0], &n, sizeof(n)) == sizeof(n)) {
        if (n < 0) {
            failed = 1;
        } else {
            total += n;
        }
    }

    while (wait(&status) > 0) {
        /* void */
    }

    if (failed) {
        return 1;
    }

    printf("%ld %.3f\n", total, now() - start);

    return 0;
}

/* Authentication with COLL_SECRET: a key derived from the secret (HKDF-SHA256), fresh
 * nonces, and HMAC-SHA256 tags compared in constant time, all from OpenSSL's libcrypto.
 * Nothing derived from the secret travels in a form that can be replayed: a link's proof
 * is a tag over a nonce its receiver drew for the communicator, and a link is taken once. */
#ifndef CL_AUTH_H
#define CL_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define CL_KEY_BYTES 32
#define CL_NONCE_BYTES 16
#define CL_TAG_BYTES 32

/* The job's key from the secret's text; 0, or -1 when libcrypto fails. */
int cl_auth_key(const char *secret, uint8_t key[CL_KEY_BYTES]);
/* Fresh random bytes (a nonce); 0, or -1. */
int cl_auth_nonce(uint8_t *out, size_t n);
/* HMAC-SHA256 under key of the concatenation of n parts (ptr, len pairs). */
void cl_auth_tag(const uint8_t key[CL_KEY_BYTES], uint8_t out[CL_TAG_BYTES], int n, ...);
/* Constant-time equality of two tags' first n bytes (n <= CL_TAG_BYTES). */
int cl_auth_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif

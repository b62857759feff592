/* Authentication primitives: see auth.h. */
#include "base/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <stdarg.h>
#include <string.h>

int cl_auth_key(const char *secret, uint8_t key[CL_KEY_BYTES])
{
    static const char salt[] = "libcollective", info[] = "coll auth v1";
    EVP_PKEY_CTX *k = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    size_t len = CL_KEY_BYTES;
    int ok = k && EVP_PKEY_derive_init(k) > 0 && EVP_PKEY_CTX_set_hkdf_md(k, EVP_sha256()) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_salt(k, (const unsigned char *)salt, sizeof(salt) - 1) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_key(k, (const unsigned char *)secret, (int)strlen(secret)) > 0 &&
             EVP_PKEY_CTX_add1_hkdf_info(k, (const unsigned char *)info, sizeof(info) - 1) > 0 &&
             EVP_PKEY_derive(k, key, &len) > 0 && len == CL_KEY_BYTES;
    EVP_PKEY_CTX_free(k);
    return ok ? 0 : -1;
}

int cl_auth_nonce(uint8_t *out, size_t n)
{
    return RAND_bytes(out, (int)n) == 1 ? 0 : -1;
}

void cl_auth_tag(const uint8_t key[CL_KEY_BYTES], uint8_t out[CL_TAG_BYTES], int n, ...)
{
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                           OSSL_PARAM_construct_end()};
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    int ok = ctx && EVP_MAC_init(ctx, key, CL_KEY_BYTES, params) == 1;
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const void *p = va_arg(ap, const void *);
        size_t len = va_arg(ap, size_t);
        ok = ok && EVP_MAC_update(ctx, p, len) == 1;
    }
    va_end(ap);
    size_t olen = 0;
    ok = ok && EVP_MAC_final(ctx, out, &olen, CL_TAG_BYTES) == 1 && olen == CL_TAG_BYTES;
    /* A tag that could not be made matches nothing a peer sends: the check fails. */
    if (!ok)
        cl_auth_nonce(out, CL_TAG_BYTES);
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
}

int cl_auth_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

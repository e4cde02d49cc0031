-- name: ocr_page
SELECT text, confidence, vertical, rotation FROM ocr_pages
WHERE image_sha256 = %(sha256)s AND engine = %(engine)s AND dpi = %(dpi)s;

-- name: save_ocr_page
INSERT INTO ocr_pages (image_sha256, engine, dpi, text, confidence, vertical, rotation, seconds)
VALUES (%(sha256)s, %(engine)s, %(dpi)s, %(text)s, %(confidence)s, %(vertical)s, %(rotation)s,
        %(seconds)s)
ON CONFLICT (image_sha256, engine, dpi) DO NOTHING;

-- name: await_ocr
INSERT INTO ocr_waiting (source_uri, checksum, pages, unread, reason)
VALUES (%(uri)s, %(checksum)s, %(pages)s, %(unread)s, %(reason)s)
ON CONFLICT (source_uri) DO UPDATE SET
    checksum = EXCLUDED.checksum, pages = EXCLUDED.pages, unread = EXCLUDED.unread,
    reason = EXCLUDED.reason,
    since = CASE WHEN ocr_waiting.checksum = EXCLUDED.checksum THEN ocr_waiting.since
                 ELSE now() END;

-- name: ocr_waiting
SELECT source_uri, checksum, pages, unread, reason, since FROM ocr_waiting ORDER BY since, source_uri;

-- name: waiting_of
SELECT source_uri, checksum, unread FROM ocr_waiting WHERE source_uri = ANY(%(uris)s);

-- name: stop_waiting
DELETE FROM ocr_waiting WHERE source_uri = %(uri)s;

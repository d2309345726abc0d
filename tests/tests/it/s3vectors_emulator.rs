//! The S3 Vectors emulator (`skald_tests::s3vectors`) driven by the real
//! `aws-sdk-s3vectors` client over HTTP: bucket and index lifecycle,
//! vector writes and reads with pagination, exact nearest neighbours, every
//! filter operator, the service's limits as the SDK's typed errors; and
//! the operations moto's s3vectors backend serves, cross-checked against it.

use aws_sdk_s3vectors::Client;
use aws_sdk_s3vectors::error::ProvideErrorMetadata as _;
use aws_sdk_s3vectors::types::{DataType, DistanceMetric, MetadataConfiguration, PutInputVector, VectorData};
use serde_json::{Value, json};
use skald_tests::s3vectors::{self, Emulator, from_document, to_document};

const BUCKET: &str = "skald-vectors";
const INDEX: &str = "memories";

async fn setup() -> (Emulator, Client) {
    let emulator = s3vectors::start().await;
    let client = s3vectors::client(&emulator.endpoint()).await;
    (emulator, client)
}

/// A bucket with one index of `dimension` and `metric`.
async fn with_index(client: &Client, dimension: i32, metric: DistanceMetric, non_filterable: &[&str]) {
    client.create_vector_bucket().vector_bucket_name(BUCKET).send().await.expect("create the bucket");
    let mut request = client
        .create_index()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .data_type(DataType::Float32)
        .dimension(dimension)
        .distance_metric(metric);
    if !non_filterable.is_empty() {
        let config = MetadataConfiguration::builder()
            .set_non_filterable_metadata_keys(Some(non_filterable.iter().map(|k| (*k).to_owned()).collect()))
            .build()
            .expect("metadata configuration");
        request = request.metadata_configuration(config);
    }
    request.send().await.expect("create the index");
}

fn vector(key: &str, data: Vec<f32>, metadata: Option<Value>) -> PutInputVector {
    let mut builder = PutInputVector::builder().key(key).data(VectorData::Float32(data));
    if let Some(m) = metadata {
        builder = builder.metadata(to_document(&m));
    }
    builder.build().expect("a put vector")
}

async fn put(client: &Client, vectors: Vec<PutInputVector>) {
    client
        .put_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .set_vectors(Some(vectors))
        .send()
        .await
        .expect("put vectors");
}

/// Deterministic pseudo-random floats in [-1, 1).
fn floats(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            #[allow(clippy::cast_precision_loss)]
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            unit * 2.0 - 1.0
        })
        .collect()
}

fn cosine_distance(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    1.0 - dot / (norm(a) * norm(b))
}

fn euclidean_distance(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2)).sum::<f64>().sqrt()
}

/// All keys of the index, page by page of `page`.
async fn list_all(client: &Client, page: i32) -> (Vec<String>, usize) {
    list_all_in(client, BUCKET, page).await
}

/// All keys of `bucket`'s index, page by page of `page`, and the pages.
async fn list_all_in(client: &Client, bucket: &str, page: i32) -> (Vec<String>, usize) {
    let (mut keys, mut pages, mut token) = (Vec::new(), 0, None);
    loop {
        let out = client
            .list_vectors()
            .vector_bucket_name(bucket)
            .index_name(INDEX)
            .max_results(page)
            .set_next_token(token)
            .send()
            .await
            .expect("list vectors");
        pages += 1;
        keys.extend(out.vectors().iter().map(|v| v.key().to_owned()));
        match out.next_token() {
            Some(t) => token = Some(t.to_owned()),
            None => return (keys, pages),
        }
    }
}

#[tokio::test]
async fn bucket_and_index_lifecycle() {
    let (_emulator, client) = setup().await;
    let created = client.create_vector_bucket().vector_bucket_name(BUCKET).send().await.expect("create the bucket");
    let bucket_arn = created.vector_bucket_arn().expect("the bucket ARN").to_owned();
    assert_eq!(bucket_arn, format!("arn:aws:s3vectors:us-east-1:123456789012:bucket/{BUCKET}"));
    let again = client.create_vector_bucket().vector_bucket_name(BUCKET).send().await.expect_err("a second create");
    assert!(again.as_service_error().is_some_and(|e| e.is_conflict_exception()), "{again:?}");

    let bucket = client.get_vector_bucket().vector_bucket_name(BUCKET).send().await.expect("get the bucket");
    let bucket = bucket.vector_bucket().expect("the bucket");
    assert_eq!(bucket.vector_bucket_name(), BUCKET);
    assert_eq!(bucket.vector_bucket_arn(), bucket_arn);

    for name in ["idx-a", "idx-b", "idx-c", "other"] {
        let out = client
            .create_index()
            .vector_bucket_name(BUCKET)
            .index_name(name)
            .data_type(DataType::Float32)
            .dimension(8)
            .distance_metric(DistanceMetric::Euclidean)
            .metadata_configuration(
                MetadataConfiguration::builder()
                    .non_filterable_metadata_keys("text")
                    .build()
                    .expect("metadata configuration"),
            )
            .send()
            .await
            .expect("create an index");
        assert_eq!(out.index_arn(), Some(format!("{bucket_arn}/index/{name}").as_str()));
    }
    let duplicate = client
        .create_index()
        .vector_bucket_name(BUCKET)
        .index_name("idx-a")
        .data_type(DataType::Float32)
        .dimension(8)
        .distance_metric(DistanceMetric::Cosine)
        .send()
        .await
        .expect_err("a duplicate index");
    assert!(duplicate.as_service_error().is_some_and(|e| e.is_conflict_exception()), "{duplicate:?}");
    let orphan = client
        .create_index()
        .vector_bucket_name("no-such-bucket")
        .index_name("idx-a")
        .data_type(DataType::Float32)
        .dimension(8)
        .distance_metric(DistanceMetric::Cosine)
        .send()
        .await
        .expect_err("an index in a missing bucket");
    assert!(orphan.as_service_error().is_some_and(|e| e.is_not_found_exception()), "{orphan:?}");

    let index = client.get_index().vector_bucket_name(BUCKET).index_name("idx-b").send().await.expect("get an index");
    let index = index.index().expect("the index");
    assert_eq!((index.index_name(), index.dimension()), ("idx-b", 8));
    assert_eq!(index.distance_metric(), &DistanceMetric::Euclidean);
    assert_eq!(index.data_type(), &DataType::Float32);
    assert_eq!(
        index.metadata_configuration().map(MetadataConfiguration::non_filterable_metadata_keys),
        Some(&["text".to_owned()][..])
    );
    // By ARN, too.
    let by_arn = client.get_index().index_arn(index.index_arn()).send().await.expect("get an index by ARN");
    assert_eq!(by_arn.index().map(|i| i.index_name()), Some("idx-b"));

    // Prefix and pagination.
    let (mut names, mut token) = (Vec::new(), None);
    loop {
        let page = client
            .list_indexes()
            .vector_bucket_name(BUCKET)
            .prefix("idx-")
            .max_results(2)
            .set_next_token(token)
            .send()
            .await
            .expect("list indexes");
        assert!(page.indexes().len() <= 2);
        names.extend(page.indexes().iter().map(|i| i.index_name().to_owned()));
        match page.next_token() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    assert_eq!(names, ["idx-a", "idx-b", "idx-c"]);

    let full = client
        .delete_vector_bucket()
        .vector_bucket_name(BUCKET)
        .send()
        .await
        .expect_err("delete a bucket with indexes");
    assert!(full.as_service_error().is_some_and(|e| e.is_conflict_exception()), "{full:?}");
    for name in ["idx-a", "idx-b", "idx-c", "other"] {
        client.delete_index().vector_bucket_name(BUCKET).index_name(name).send().await.expect("delete an index");
    }
    let gone =
        client.get_index().vector_bucket_name(BUCKET).index_name("idx-a").send().await.expect_err("a deleted index");
    assert!(gone.as_service_error().is_some_and(|e| e.is_not_found_exception()), "{gone:?}");
    client.delete_vector_bucket().vector_bucket_name(BUCKET).send().await.expect("delete the empty bucket");
    let gone = client.get_vector_bucket().vector_bucket_name(BUCKET).send().await.expect_err("a deleted bucket");
    assert!(gone.as_service_error().is_some_and(|e| e.is_not_found_exception()), "{gone:?}");
}

#[tokio::test]
async fn put_get_list_delete() {
    let (_emulator, client) = setup().await;
    with_index(&client, 4, DistanceMetric::Cosine, &["text"]).await;
    let vectors: Vec<PutInputVector> = (0..25)
        .map(|i| vector(&format!("k{i:02}"), floats(i, 4), Some(json!({ "n": i, "text": format!("memory {i}") }))))
        .collect();
    put(&client, vectors).await;
    // An upsert replaces data and metadata.
    put(&client, vec![vector("k03", vec![1.0, 0.0, 0.0, 0.0], Some(json!({ "n": 303 })))]).await;

    let got = client
        .get_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .keys("k03")
        .keys("missing")
        .keys("k04")
        .return_data(true)
        .return_metadata(true)
        .send()
        .await
        .expect("get vectors");
    let keys: Vec<&str> = got.vectors().iter().map(|v| v.key()).collect();
    assert_eq!(keys, ["k03", "k04"], "a missing key is left out");
    assert_eq!(got.vectors()[0].data().and_then(|d| d.as_float32().ok()), Some(&vec![1.0, 0.0, 0.0, 0.0]));
    assert_eq!(got.vectors()[0].metadata().map(from_document), Some(json!({ "n": 303 })));
    assert_eq!(got.vectors()[1].data().and_then(|d| d.as_float32().ok()), Some(&floats(4, 4)));
    assert_eq!(got.vectors()[1].metadata().map(from_document), Some(json!({ "n": 4, "text": "memory 4" })));

    let bare = client
        .get_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .keys("k04")
        .send()
        .await
        .expect("get vectors");
    assert!(
        bare.vectors()[0].data().is_none() && bare.vectors()[0].metadata().is_none(),
        "data and metadata only on request"
    );

    let expected: Vec<String> = (0..25).map(|i| format!("k{i:02}")).collect();
    assert_eq!(list_all(&client, 10).await, (expected.clone(), 3));
    assert_eq!(list_all(&client, 1000).await, (expected, 1));

    let deleted = ["k00", "k05", "k10", "k15", "k20", "never-there"];
    client
        .delete_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .set_keys(Some(deleted.iter().map(|k| (*k).to_owned()).collect()))
        .send()
        .await
        .expect("delete vectors");
    let (left, pages) = list_all(&client, 7).await;
    assert_eq!(left.len(), 20);
    assert_eq!(pages, 3);
    assert!(deleted.iter().all(|k| !left.iter().any(|l| l == k)));

    // Parallel listing: the segments partition the keys.
    let mut segmented = Vec::new();
    for segment in 0..3 {
        let out = client
            .list_vectors()
            .vector_bucket_name(BUCKET)
            .index_name(INDEX)
            .segment_count(3)
            .segment_index(segment)
            .send()
            .await
            .expect("list a segment");
        segmented.extend(out.vectors().iter().map(|v| v.key().to_owned()));
    }
    segmented.sort();
    assert_eq!(segmented, left);
}

#[tokio::test]
async fn query_returns_exact_nearest_neighbours() {
    for (metric, measure) in [
        (DistanceMetric::Cosine, cosine_distance as fn(&[f32], &[f32]) -> f64),
        (DistanceMetric::Euclidean, euclidean_distance),
    ] {
        let (_emulator, client) = setup().await;
        with_index(&client, 16, metric.clone(), &[]).await;
        let data: Vec<(String, Vec<f32>)> = (0..300).map(|i| (format!("v{i:03}"), floats(1000 + i, 16))).collect();
        for chunk in data.chunks(100) {
            put(&client, chunk.iter().map(|(k, d)| vector(k, d.clone(), Some(json!({ "i": k })))).collect()).await;
        }
        let query = floats(7, 16);
        let mut expected: Vec<(f64, &str)> = data.iter().map(|(k, d)| (measure(&query, d), k.as_str())).collect();
        expected.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        expected.truncate(10);

        let out = client
            .query_vectors()
            .vector_bucket_name(BUCKET)
            .index_name(INDEX)
            .query_vector(VectorData::Float32(query.clone()))
            .top_k(10)
            .return_distance(true)
            .return_metadata(true)
            .send()
            .await
            .expect("query");
        assert_eq!(out.distance_metric(), Some(&metric));
        let keys: Vec<&str> = out.vectors().iter().map(|v| v.key()).collect();
        let want: Vec<&str> = expected.iter().map(|(_, k)| *k).collect();
        assert_eq!(keys, want, "{metric:?}");
        for (hit, (distance, key)) in out.vectors().iter().zip(&expected) {
            let got = f64::from(hit.distance().expect("a distance"));
            assert!((got - distance).abs() < 1e-5, "{metric:?} {key}: {got} vs {distance}");
            assert_eq!(hit.metadata().map(from_document), Some(json!({ "i": key })));
        }
        let sorted = out.vectors().windows(2).all(|w| w[0].distance() <= w[1].distance());
        assert!(sorted, "ascending distances");

        let plain = client
            .query_vectors()
            .vector_bucket_name(BUCKET)
            .index_name(INDEX)
            .query_vector(VectorData::Float32(query))
            .top_k(3)
            .send()
            .await
            .expect("query");
        assert_eq!(plain.vectors().len(), 3);
        assert!(plain.vectors().iter().all(|v| v.distance().is_none() && v.metadata().is_none()));
    }
}

#[tokio::test]
async fn every_filter_operator() {
    let (_emulator, client) = setup().await;
    with_index(&client, 2, DistanceMetric::Cosine, &["secret"]).await;
    let rows = [
        ("a", json!({ "genre": "drama", "year": 2019, "tags": ["x", "y"], "fresh": true, "secret": "s" })),
        ("b", json!({ "genre": "comedy", "year": 2020, "tags": ["y"], "fresh": false })),
        ("c", json!({ "genre": "documentary", "year": 2021.5, "fresh": true })),
        ("d", json!({ "genre": "drama", "year": 2023 })),
        ("e", json!({ "secret": "s" })),
    ];
    put(&client, rows.iter().map(|(k, m)| vector(k, vec![1.0, 0.5], Some(m.clone()))).collect()).await;

    let table: &[(Value, &[&str])] = &[
        (json!({ "genre": "drama" }), &["a", "d"]),
        (json!({ "genre": { "$eq": "comedy" } }), &["b"]),
        (json!({ "tags": { "$eq": "y" } }), &["a", "b"]),
        (json!({ "fresh": true }), &["a", "c"]),
        (json!({ "genre": { "$ne": "drama" } }), &["b", "c", "e"]),
        (json!({ "year": { "$gt": 2020 } }), &["c", "d"]),
        (json!({ "year": { "$gte": 2020 } }), &["b", "c", "d"]),
        (json!({ "year": { "$lt": 2020 } }), &["a"]),
        (json!({ "year": { "$lte": 2020 } }), &["a", "b"]),
        (json!({ "year": { "$gt": 2019, "$lt": 2023 } }), &["b", "c"]),
        (json!({ "genre": { "$in": ["comedy", "documentary"] } }), &["b", "c"]),
        (json!({ "tags": { "$in": ["x", "z"] } }), &["a"]),
        (json!({ "genre": { "$nin": ["comedy", "documentary"] } }), &["a", "d", "e"]),
        (json!({ "tags": { "$exists": true } }), &["a", "b"]),
        (json!({ "tags": { "$exists": false } }), &["c", "d", "e"]),
        (json!({ "$and": [{ "genre": "drama" }, { "year": { "$gt": 2020 } }] }), &["d"]),
        (json!({ "$or": [{ "genre": "comedy" }, { "year": { "$gte": 2023 } }] }), &["b", "d"]),
        (json!({ "genre": "drama", "fresh": true }), &["a"]),
        (
            json!({ "$or": [{ "$and": [{ "fresh": true }, { "tags": { "$exists": false } }] }, { "genre": "comedy" }] }),
            &["b", "c"],
        ),
        // Non-filterable metadata is invisible to filters.
        (json!({ "secret": "s" }), &[]),
        (json!({ "secret": { "$exists": true } }), &[]),
    ];
    for (filter, want) in table {
        let out = client
            .query_vectors()
            .vector_bucket_name(BUCKET)
            .index_name(INDEX)
            .query_vector(VectorData::Float32(vec![1.0, 0.5]))
            .top_k(100)
            .filter(to_document(filter))
            .send()
            .await
            .unwrap_or_else(|e| panic!("query with {filter}: {e:?}"));
        let mut keys: Vec<&str> = out.vectors().iter().map(|v| v.key()).collect();
        keys.sort_unstable();
        assert_eq!(keys, *want, "filter {filter}");
    }

    for bad in [
        json!({ "genre": { "$regex": "d.*" } }),
        json!({ "$and": [] }),
        json!({ "year": { "$gt": "2020" } }),
        json!({ "genre": { "$in": [] } }),
    ] {
        let err = client
            .query_vectors()
            .vector_bucket_name(BUCKET)
            .index_name(INDEX)
            .query_vector(VectorData::Float32(vec![1.0, 0.5]))
            .top_k(5)
            .filter(to_document(&bad))
            .send()
            .await
            .expect_err("an invalid filter");
        assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{bad}: {err:?}");
    }
}

#[tokio::test]
async fn limits_are_typed_errors() {
    let (_emulator, client) = setup().await;
    with_index(&client, 3, DistanceMetric::Cosine, &["body"]).await;

    let too_many: Vec<PutInputVector> = (0..501).map(|i| vector(&format!("k{i}"), vec![1.0, 2.0, 3.0], None)).collect();
    let err = client
        .put_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .set_vectors(Some(too_many))
        .send()
        .await
        .expect_err("501 vectors");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");
    let just_enough: Vec<PutInputVector> =
        (0..500).map(|i| vector(&format!("k{i}"), vec![1.0, 2.0, 3.0], None)).collect();
    put(&client, just_enough).await;

    let query = |k: i32| {
        client
            .query_vectors()
            .vector_bucket_name(BUCKET)
            .index_name(INDEX)
            .query_vector(VectorData::Float32(vec![1.0, 0.0, 0.0]))
            .top_k(k)
            .send()
    };
    let err = query(101).await.expect_err("topK 101");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");
    assert_eq!(query(100).await.expect("topK 100").vectors().len(), 100);

    let err = client
        .put_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .vectors(vector("short", vec![1.0, 2.0], None))
        .send()
        .await
        .expect_err("a dimension mismatch");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");
    let err = client
        .query_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .query_vector(VectorData::Float32(vec![1.0; 4]))
        .top_k(1)
        .send()
        .await
        .expect_err("a query of the wrong dimension");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");

    // 2 KB of filterable metadata is the limit; the same text in a
    // non-filterable key is fine.
    let big = "x".repeat(2100);
    let err = client
        .put_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .vectors(vector("big", vec![1.0, 2.0, 3.0], Some(json!({ "title": big }))))
        .send()
        .await
        .expect_err("filterable metadata over 2 KB");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");
    put(&client, vec![vector("big", vec![1.0, 2.0, 3.0], Some(json!({ "body": big, "title": "t" })))]).await;
    let err = client
        .put_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .vectors(vector("huge", vec![1.0, 2.0, 3.0], Some(json!({ "body": "x".repeat(41 * 1024) }))))
        .send()
        .await
        .expect_err("metadata over 40 KB");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");

    let keys: Vec<String> = (0..101).map(|i| format!("k{i}")).collect();
    let err = client
        .get_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .set_keys(Some(keys))
        .send()
        .await
        .expect_err("101 keys");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");
    let err = client
        .list_vectors()
        .vector_bucket_name(BUCKET)
        .index_name(INDEX)
        .max_results(1001)
        .send()
        .await
        .expect_err("a page of 1001");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");

    let create = |name: &'static str, dimension: i32, keys: usize| {
        let config = MetadataConfiguration::builder()
            .set_non_filterable_metadata_keys(Some((0..keys).map(|i| format!("key{i}")).collect()))
            .build()
            .expect("metadata configuration");
        client
            .create_index()
            .vector_bucket_name(BUCKET)
            .index_name(name)
            .data_type(DataType::Float32)
            .dimension(dimension)
            .distance_metric(DistanceMetric::Cosine)
            .metadata_configuration(config)
            .send()
    };
    let err = create("eleven", 3, 11).await.expect_err("11 non-filterable keys");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");
    let err = create("wide", 4097, 1).await.expect_err("dimension 4097");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");
    let err = create("flat", 0, 1).await.expect_err("dimension 0");
    assert!(err.as_service_error().is_some_and(|e| e.is_validation_exception()), "{err:?}");
    create("ten", 4096, 10).await.expect("10 non-filterable keys, dimension 4096");
}

#[tokio::test]
async fn a_missing_index_is_not_found() {
    let (_emulator, client) = setup().await;
    with_index(&client, 3, DistanceMetric::Cosine, &[]).await;
    let err = client
        .query_vectors()
        .vector_bucket_name(BUCKET)
        .index_name("no-such-index")
        .query_vector(VectorData::Float32(vec![1.0, 0.0, 0.0]))
        .top_k(1)
        .send()
        .await
        .expect_err("a missing index");
    assert!(err.as_service_error().is_some_and(|e| e.is_not_found_exception()), "{err:?}");
    let err = client
        .put_vectors()
        .vector_bucket_name("no-such-bucket")
        .index_name(INDEX)
        .vectors(vector("k", vec![1.0, 0.0, 0.0], None))
        .send()
        .await
        .expect_err("a missing bucket");
    assert!(err.as_service_error().is_some_and(|e| e.is_not_found_exception()), "{err:?}");
    let err = client
        .list_vectors()
        .vector_bucket_name(BUCKET)
        .index_name("no-such-index")
        .send()
        .await
        .expect_err("a missing index");
    assert!(err.as_service_error().is_some_and(|e| e.is_not_found_exception()), "{err:?}");
}

/// An SDK error as JSON: the error code the SDK parsed and the HTTP status.
macro_rules! failure {
    ($err:expr) => {
        json!([$err.code(), $err.raw_response().map(|r| r.status().as_u16())])
    };
}

/// What a backend answers to one put/get/list/delete sequence, as JSON:
/// what the cross-check compares between the emulator and moto.
async fn sequence(client: &Client, bucket: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    client.create_vector_bucket().vector_bucket_name(bucket).send().await.expect("create the bucket");
    let config =
        MetadataConfiguration::builder().non_filterable_metadata_keys("text").build().expect("metadata configuration");
    client
        .create_index()
        .vector_bucket_name(bucket)
        .index_name(INDEX)
        .data_type(DataType::Float32)
        .dimension(3)
        .distance_metric(DistanceMetric::Cosine)
        .metadata_configuration(config)
        .send()
        .await
        .expect("create the index");
    let index = client.get_index().vector_bucket_name(bucket).index_name(INDEX).send().await.expect("get the index");
    let index = index.index().expect("the index");
    seen.push(json!({
        "dimension": index.dimension(),
        "metric": index.distance_metric().as_str(),
    }));

    let vectors: Vec<PutInputVector> = (0..12)
        .map(|i| {
            vector(
                &format!("k{i:02}"),
                floats(i, 3),
                Some(json!({ "n": i, "tag": ["a", "b"], "text": format!("memory {i}") })),
            )
        })
        .collect();
    client
        .put_vectors()
        .vector_bucket_name(bucket)
        .index_name(INDEX)
        .set_vectors(Some(vectors))
        .send()
        .await
        .expect("put vectors");
    client
        .put_vectors()
        .vector_bucket_name(bucket)
        .index_name(INDEX)
        .vectors(vector("k03", vec![0.5, 0.25, -1.0], Some(json!({ "n": 303, "flag": true }))))
        .send()
        .await
        .expect("upsert a vector");

    let got = client
        .get_vectors()
        .vector_bucket_name(bucket)
        .index_name(INDEX)
        .keys("k03")
        .keys("missing")
        .keys("k07")
        .return_data(true)
        .return_metadata(true)
        .send()
        .await
        .expect("get vectors");
    let mut got: Vec<Value> = got
        .vectors()
        .iter()
        .map(|v| {
            json!({
                "key": v.key(),
                "data": v.data().and_then(|d| d.as_float32().ok()),
                "metadata": v.metadata().map(from_document),
            })
        })
        .collect();
    got.sort_by(|a, b| a["key"].as_str().cmp(&b["key"].as_str()));
    seen.push(Value::Array(got));

    let list = |page: i32| async move {
        // moto ignores `maxResults`: compare the keys, not the pages.
        let mut keys = list_all_in(client, bucket, page).await.0;
        keys.sort();
        keys
    };
    seen.push(json!(list(5).await));
    client
        .delete_vectors()
        .vector_bucket_name(bucket)
        .index_name(INDEX)
        .keys("k00")
        .keys("k05")
        .keys("never-there")
        .send()
        .await
        .expect("delete vectors");
    seen.push(json!(list(4).await));

    let missing = client
        .get_index()
        .vector_bucket_name(bucket)
        .index_name("no-such-index")
        .send()
        .await
        .expect_err("a missing index");
    seen.push(failure!(missing));
    let taken = client.create_vector_bucket().vector_bucket_name(bucket).send().await.expect_err("a taken bucket name");
    seen.push(failure!(taken));
    let not_empty =
        client.delete_vector_bucket().vector_bucket_name(bucket).send().await.expect_err("a bucket with an index");
    seen.push(failure!(not_empty));
    let short = client
        .put_vectors()
        .vector_bucket_name(bucket)
        .index_name(INDEX)
        .vectors(vector("short", vec![1.0, 2.0], None))
        .send()
        .await
        .expect_err("a dimension mismatch");
    seen.push(failure!(short));

    client.delete_index().vector_bucket_name(bucket).index_name(INDEX).send().await.expect("delete the index");
    client.delete_vector_bucket().vector_bucket_name(bucket).send().await.expect("delete the bucket");
    seen
}

/// The same sequence against the emulator and moto's s3vectors backend
/// (moto ≥ 5.2, the S3 server of the other suites) gives the same answers.
/// moto has no QueryVectors, so queries are not compared, and its
/// ListVectors ignores `maxResults` (one page of everything), so only the
/// keys listed are (the emulator's pages are checked in
/// `put_get_list_delete`); and it ignores `metadataConfiguration` (GetIndex
/// has none), so the non-filterable keys are not compared either.
#[tokio::test]
async fn agrees_with_moto() {
    let (_emulator, client) = setup().await;
    let moto = s3vectors::client(&skald_tests::moto::endpoint()).await;
    let bucket = format!("xcheck-{}", std::process::id());
    let ours = sequence(&client, &bucket).await;
    let theirs = sequence(&moto, &bucket).await;
    for expected in
        [json!(["NotFoundException", 404]), json!(["ConflictException", 409]), json!(["ValidationException", 400])]
    {
        assert!(ours.contains(&expected), "{expected} in {ours:?}");
    }
    assert_eq!(ours, theirs);
}
